//! Atomic output: write to a temporary file in the target's directory, then
//! rename it into place. An existing target is replaced only by the rename;
//! on error or drop the temporary file is removed.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// An output file being written.
#[derive(Debug)]
pub struct AtomicFile {
    file: Option<File>,
    tmp: PathBuf,
    target: PathBuf,
}

impl AtomicFile {
    /// Creates a temporary file next to `target`.
    pub fn create(target: &Path) -> io::Result<AtomicFile> {
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let base = target.file_name().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "output has no file name")
        })?;
        let mut n = 0u32;
        loop {
            let mut name = std::ffi::OsString::from(".");
            name.push(base);
            name.push(format!(".tmp.{}.{n}", std::process::id()));
            let tmp = dir.join(name);
            match OpenOptions::new().write(true).create_new(true).open(&tmp) {
                Ok(file) => {
                    return Ok(AtomicFile {
                        file: Some(file),
                        tmp,
                        target: target.to_path_buf(),
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 100 => n += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// The open temporary file.
    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("file present until commit")
    }

    /// Path of the temporary file.
    pub fn tmp_path(&self) -> &Path {
        &self.tmp
    }

    /// Renames into place. When an existing file is replaced, the data is
    /// flushed to disk first, so a crash leaves the old file or the new one,
    /// never a torn one; a new file needs no flush (nothing is lost if it is
    /// missing after a crash), which keeps big outputs as fast as `cp`.
    pub fn commit(mut self) -> io::Result<()> {
        if let Some(f) = self.file.take() {
            if self.target.exists() {
                f.sync_all()?;
            }
        }
        std::fs::rename(&self.tmp, &self.target)?;
        self.tmp = PathBuf::new();
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    // The target appears only on commit and a dropped file leaves nothing behind.
    #[test]
    fn commit_and_abandon() {
        let dir = std::env::temp_dir().join(format!("m2s-out-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("out.data");
        std::fs::write(&target, b"old").unwrap();
        let mut f = AtomicFile::create(&target).unwrap();
        f.file().write_all(b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        f.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        let mut f = AtomicFile::create(&target).unwrap();
        f.file().write_all(b"partial").unwrap();
        let tmp = f.tmp_path().to_path_buf();
        drop(f);
        assert!(!tmp.exists());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
