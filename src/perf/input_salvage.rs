//! `--salvage` on an opened input: where a recording cut short stops
//! holding whole records (its data section, its features, the record a
//! COMPRESSED record's data ends inside), found once at the open, so every
//! later read sees the input end there. The cut itself is found by
//! `salvage`'s pure functions over the file.

use super::consts::FILE_HEADER_SIZE;

use super::header::{FeatureBits, FeatureTable, FileHeader, Kind};
use super::input::{io_err, Input, InputError, Layout, DATA_SIZE_FIELD};
use super::salvage::{compressed_tail, find_cut, Salvaged, FEATURES_CUT, KILLED, PAST_EOF};
use crate::bytes::Rd;

impl Input {
    /// With `salvage`: notes a record cut short at the end of the
    /// decompressed data of the COMPRESSED records (see
    /// [`super::salvage::InnerCut`]), which the walk then drops.
    pub(super) fn salvage_compressed(&mut self) -> Result<(), InputError> {
        let cap = self.decompressed_cap()?;
        let range = self.records_range();
        let tail = compressed_tail(&self.file, range, self.endian(), cap)
            .map_err(io_err("reading", &self.path))?;
        let Some(inner) = tail else { return Ok(()) };
        let s = self.salvaged.get_or_insert(Salvaged {
            at: range.1,
            dropped: 0,
            cut_record: None,
            header: None,
            lost: FeatureBits::default(),
            inner: None,
            stream_stop: false,
        });
        s.inner = Some(inner);
        Ok(())
    }

    /// The layout of a file-mode input with `salvage` whose data section
    /// is whole and whose feature table or sections are cut short (the
    /// file cut at or after the data's end): the whole sections kept, the
    /// others' bits cleared and noted as lost.
    pub(super) fn salvage_features(
        &mut self,
        mut header: FileHeader,
    ) -> Result<Layout, InputError> {
        let at = header.feature_table_offset();
        let mut kept = Vec::new();
        let mut lost = FeatureBits::default();
        for (i, bit) in header.features.iter().enumerate() {
            let entry = at + 16 * i as u64;
            let mut b = [0u8; 16];
            let one = FeatureBits::from_bits([bit]);
            let section = (entry.checked_add(16).is_some_and(|end| end <= self.len))
                .then(|| self.read_at(&mut b, entry))
                .transpose()?
                .and_then(|()| FeatureTable::parse(&b, header.endian, &one, entry, self.len).ok());
            match section.and_then(|t| t.0.first().copied()) {
                Some(s) => kept.push(s),
                None => lost.set(bit),
            }
        }
        header.features = FeatureBits::from_bits(kept.iter().map(|(b, _)| *b));
        let end = header.data.end();
        self.salvaged = Some(Salvaged {
            at: end,
            dropped: self.len - end,
            cut_record: None,
            header: Some(FEATURES_CUT),
            lost,
            inner: None,
            stream_stop: false,
        });
        Ok(Layout::File {
            header,
            features: FeatureTable(kept),
        })
    }

    /// The layout of a file-mode input opened with `salvage` (`head` its
    /// first bytes): as it stands when whole (its data section up to its
    /// last whole record); else (a data section past
    /// the end of the file, or data size 0 where perf record's killed
    /// file has records instead of features) its data section taken to
    /// run to the last whole record, without features.
    pub(super) fn salvage_file(&mut self, head: &mut [u8]) -> Result<Layout, InputError> {
        if head.len() < FILE_HEADER_SIZE as usize {
            // too short for a header: its error
            FileHeader::parse(head, self.len).map_err(|err| self.format(err))?;
        }
        let e = Kind::of(head).map_err(|err| self.format(err))?.endian();
        let r = Rd(e);
        let data_offset = r.u64(head, 40).unwrap_or(0);
        let data_size = r.u64(head, DATA_SIZE_FIELD as usize).unwrap_or(0);
        let past_eof = data_offset <= self.len
            && data_offset
                .checked_add(data_size)
                .is_none_or(|end| end > self.len);
        let why = if past_eof {
            PAST_EOF
        } else {
            let header = FileHeader::parse(head, self.len).map_err(|err| self.format(err))?;
            match self.feature_table(&header) {
                Err(InputError::Format { .. }) if header.data.size == 0 => KILLED,
                Err(InputError::Format { .. }) => return self.salvage_features(header),
                Ok(_) if self.killed(&header) => KILLED,
                features => {
                    let features = features?;
                    let mut header = header;
                    self.salvage_data(&mut header)?;
                    return Ok(Layout::File { header, features });
                }
            }
        };
        // the records run to the end of the file at most: the header is
        // checked as if it said so
        let at = DATA_SIZE_FIELD as usize;
        head[at..at + 8].copy_from_slice(&e.u64_bytes(self.len - data_offset));
        let mut header = FileHeader::parse(head, self.len).map_err(|err| self.format(err))?;
        let lost = std::mem::take(&mut header.features);
        self.layout = Layout::File {
            header,
            features: FeatureTable::default(),
        };
        self.salvage(data_offset, Some(why))?;
        if let Some(s) = &mut self.salvaged {
            s.lost = lost;
        }
        if let Layout::File { header, .. } = &mut self.layout {
            header.data.size = self.len - data_offset;
        }
        Ok(self.layout.clone())
    }

    /// A file-mode input with `salvage` whose header and features are
    /// whole: a data section ending inside a record, or in zeros (a tail
    /// zero-filled after a crash), is taken to end at its last whole
    /// record, noted in [`Input::salvaged`]; the features stay.
    fn salvage_data(&mut self, header: &mut FileHeader) -> Result<(), InputError> {
        let (start, end) = (header.data.offset, header.data.end());
        let cut = find_cut(&self.file, (start, end), header.endian, false, |_| false)
            .map_err(io_err("reading", &self.path))?;
        if let Some(cut) = cut {
            header.data.size = cut.at - start;
            self.salvaged = Some(cut);
        }
        Ok(())
    }

    /// Ends the input at the last whole record of its records from
    /// `start` to its end, noting it (with `header`, what was wrong with a
    /// file-mode header) in [`Input::salvaged`]. A file-mode header fixed
    /// counts as salvaged even when its records all are whole.
    pub(super) fn salvage(
        &mut self,
        start: u64,
        header: Option<&'static str>,
    ) -> Result<(), InputError> {
        let pipe = matches!(self.layout, Layout::Pipe(_));
        let range = (start, self.len);
        let cut = find_cut(&self.file, range, self.endian(), self.streamed, |at| {
            pipe && self.text_from(at)
        })
        .map_err(io_err("reading", &self.path))?;
        let mut cut = match (cut, header) {
            (Some(cut), _) => cut,
            (None, Some(_)) => Salvaged {
                at: self.len,
                dropped: 0,
                cut_record: None,
                header: None,
                lost: FeatureBits::default(),
                inner: None,
                stream_stop: false,
            },
            (None, None) => return Ok(()),
        };
        cut.header = header;
        self.len = cut.at;
        self.salvaged = Some(cut);
        Ok(())
    }
}
