//! The pprof Profile messages (github.com/google/pprof, proto/profile.proto),
//! declared with prost's derive from the schema's field numbers and types:
//! prost encodes them, so no protoc at build time and no hand-written wire
//! format. Strings are indices into `string_table`, whose entry 0 is "".

/// The whole profile.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Profile {
    /// What each value of a sample means, in order.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The aggregated samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Mapped address ranges; ids are their 1-based positions.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Program counters, with their symbolized lines if any.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions the lines point to.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string, deduplicated; index 0 is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Regex of frames to drop (string index).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Regex of frames to keep (string index).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// When the profile was taken, ns since the epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long it covers, ns.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// The kind of the sampling period.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The sampling period, if one.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type pprof shows by default (string index of its type).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// A (type, unit) pair of string indices.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ValueType {
    /// E.g. `cycles_event`.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// E.g. `count`.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// One stack with its values and labels.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// pid, tid, comm, thread_comm.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// A key with a string or a number.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Label {
    /// String index of the key.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String index of the value (0 when numeric).
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// Numeric value.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// String index of the numeric value's unit.
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// A mapped range of a binary.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Mapping {
    /// 1-based id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// First address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// One past the last address.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// String index of the path.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// String index of the build id in hex.
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Its locations carry function names.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// ... source file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// ... line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// ... inlined frames.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// One program counter.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Location {
    /// 1-based id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The mapping holding `address`, 0 for none.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The address as the process saw it.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Innermost inlined function first, the real function last.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Several functions folded into one (not used here).
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// A function and line at a location.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Line {
    /// The function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Source line, 0 when unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
    /// Source column, 0 when unknown.
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// A function.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Function {
    /// 1-based id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// String index of the (demangled) name.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// String index of the name as the binary has it.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// String index of the source file.
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// First line, 0 when unknown.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}
