//! Files in and out. memplan never overwrites or deletes a file it did not name itself, and
//! never leaves half a file behind:
//! - inputs are read whole ([`read_text`], [`read_bytes`]);
//! - an output a user names (`alloc -o`, `schedule -o`, `remat -o`, `run --save`) must not
//!   exist: [`refuse_existing`] says so before any work is done, and [`write_new`] creates
//!   the file only if it still does not exist when written;
//! - `plan --emit` and `snapshot --emit` write memplan's own fixed names into a directory
//!   ([`write_report_files`], [`write_named_files`]):
//!   it replaces an earlier run's files of those names and never deletes, renames or
//!   writes any other file there. It refuses (and writes nothing) when the directory path
//!   exists but is not a directory, or when one of the names it is about to write is
//!   something other than a regular file (a directory or a symbolic link, which could
//!   point at a file that is not ours).
//!
//! Every output goes through ONE path, [`Staged`]: the bytes are written to a temporary
//! file next to the target (same directory, so the rename below never crosses file
//! systems), named `.NAME.memplan-PID-N.tmp` and created with `create_new`, so it is
//! always a file this process made and never one of a user's (a `.report.txt.tmp` of
//! theirs is left alone); the file is flushed to disk, then renamed onto the target. A
//! failure at any point (a full disk, a file-size limit, a directory that cannot be
//! written) removes the temporary file, so nothing is left behind and the target is as it
//! was. `plan --emit` stages every file before it renames any, so a failure leaves the
//! directory as it was. [`write_new`] first reserves the target's name with `create_new`
//! (an empty file, which only memplan's own rename then replaces, and which is removed
//! again if the write fails): a file that appeared since [`refuse_existing`] looked is
//! refused, never overwritten, on every file system.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use memplan::formats::emit::Emit;

use super::Failure;

/// The text of the file at `path`.
pub fn read_text(path: &Path) -> Result<String, Failure> {
    let bytes = std::fs::read(path).map_err(|e| Failure::bad_input(format_args!("cannot read {}: {e}", path.display())))?;
    String::from_utf8(bytes).map_err(|e| {
        // Where the text stops being UTF-8: the byte offset, and its line and column.
        let (at, bytes) = (e.utf8_error().valid_up_to(), e.as_bytes());
        let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        let column = at - bytes[..at].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) + 1;
        Failure::bad_input(format_args!(
            "{}:{line}:{column}: not UTF-8 text: no valid UTF-8 character starts at byte offset {at} (0x{:02x})\n  hint: memplan reads .step, CSV and JSON files as UTF-8; save the file in that encoding",
            path.display(),
            bytes[at]
        ))
    })
}

/// The bytes of the file at `path`.
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure::bad_input(format_args!("{}: cannot read: {e}", path.display())))
}

/// `Err` if `path` exists: an output is refused before any work is done.
pub fn refuse_existing(path: &Path) -> Result<(), Failure> {
    if std::fs::symlink_metadata(path).is_ok() {
        return Err(exists(path));
    }
    Ok(())
}

fn exists(path: &Path) -> Failure {
    Failure::bad_input(format_args!("{} exists; memplan never overwrites a file", path.display()))
}

fn cannot_write(path: &Path, e: std::io::Error) -> Failure {
    Failure::bad_input(format_args!("cannot write {}: {e}", path.display()))
}

/// Writes `bytes` to a NEW file at `path` (an existing file, even one made since
/// [`refuse_existing`] looked, is refused, never overwritten). On failure nothing is left:
/// neither the file nor a temporary one.
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    // Reserve the name: from here on the target is a file memplan made.
    let reserved = OpenOptions::new().write(true).create_new(true).open(path).map_err(|e| match e.kind() {
        ErrorKind::AlreadyExists => exists(path),
        _ => cannot_write(path, e),
    })?;
    drop(reserved);
    let written = Staged::write(path, bytes).and_then(Staged::commit);
    written.map_err(|e| {
        let _ = std::fs::remove_file(path);
        cannot_write(path, e)
    })
}

/// A finished temporary file waiting to take its target's place (see the module docs);
/// dropped without [`Staged::commit`], it is removed.
struct Staged {
    temp: PathBuf,
    target: PathBuf,
    committed: bool,
}

/// How many temporary names are tried before giving up (each is `create_new`: a name taken
/// by another file, of a user or of an earlier run killed midway, is skipped).
const TEMP_NAMES: u32 = 100;

impl Staged {
    /// Writes `bytes` to a new temporary file next to `target` and flushes it to disk.
    fn write(target: &Path, bytes: &[u8]) -> std::io::Result<Staged> {
        let (temp, mut file) = create_temp(target)?;
        let staged = Staged { temp, target: target.to_path_buf(), committed: false };
        file.write_all(bytes)?;
        file.sync_all()?;
        Ok(staged)
    }

    /// Renames the temporary file onto the target (replacing it, atomically).
    fn commit(mut self) -> std::io::Result<()> {
        std::fs::rename(&self.temp, &self.target)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// A new, uniquely named file `.NAME.memplan-PID-N.tmp` in `target`'s directory.
fn create_temp(target: &Path) -> std::io::Result<(PathBuf, File)> {
    let name = target.file_name().ok_or_else(|| std::io::Error::new(ErrorKind::InvalidInput, "not a file name"))?;
    let dir = target.parent().unwrap_or(Path::new(""));
    let pid = std::process::id();
    for n in 0..TEMP_NAMES {
        let temp = dir.join(format!(".{}.memplan-{pid}-{n}.tmp", name.to_string_lossy()));
        match OpenOptions::new().write(true).create_new(true).open(&temp) {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(ErrorKind::AlreadyExists, format!("{TEMP_NAMES} temporary names next to it are taken")))
}

/// Writes each `(format, contents)` to its file in `dir` (created if missing), as the
/// module docs say; returns the paths written, in order.
pub fn write_report_files(dir: &Path, outputs: &[(Emit, String)]) -> Result<Vec<PathBuf>, Failure> {
    let named: Vec<(&str, &str)> = outputs.iter().map(|(emit, contents)| (emit.file_name(), contents.as_str())).collect();
    write_named_files(dir, &named)
}

/// Writes each `(file name, contents)` into `dir` (created if missing), as
/// [`write_report_files`] writes `plan --emit`'s files (`snapshot --emit` has names of its
/// own); returns the paths written, in order.
pub fn write_named_files(dir: &Path, outputs: &[(&str, &str)]) -> Result<Vec<PathBuf>, Failure> {
    match std::fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => {
            return Err(Failure::bad_input(format_args!(
                "{} exists and is not a directory; -o names the directory the files go in",
                dir.display()
            )));
        }
        Ok(_) => {}
        Err(_) => std::fs::create_dir_all(dir).map_err(|e| cannot_write(dir, e))?,
    }
    let targets: Vec<PathBuf> = outputs.iter().map(|(name, _)| dir.join(name)).collect();
    for path in &targets {
        if let Ok(meta) = std::fs::symlink_metadata(path)
            && !meta.file_type().is_file()
        {
            return Err(Failure::bad_input(format_args!(
                "{} exists and is not a regular file (a directory or a link); memplan writes only regular files it names itself",
                path.display()
            )));
        }
    }
    // Every file is staged before any replaces its target: a failure changes nothing.
    let mut staged = Vec::with_capacity(outputs.len());
    for (path, (_, contents)) in targets.iter().zip(outputs) {
        staged.push(Staged::write(path, contents.as_bytes()).map_err(|e| cannot_write(path, e))?);
    }
    for file in staged {
        let path = file.target.clone();
        file.commit().map_err(|e| cannot_write(&path, e))?;
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("memplan-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_new_file_is_written_once_and_never_overwritten() {
        let dir = scratch("new");
        let path = dir.join("out.txt");
        assert!(refuse_existing(&path).is_ok());
        write_new(&path, b"first").unwrap();
        for refused in [refuse_existing(&path).unwrap_err(), write_new(&path, b"second").unwrap_err()] {
            assert!(refused.message.contains("exists; memplan never overwrites a file"), "{}", refused.message);
        }
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        assert_eq!(names(&dir), ["out.txt"], "no temporary file left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn temporary_names_are_never_a_users_file() {
        let dir = scratch("temp");
        let target = dir.join("plan.json");
        // A user's file with the old fixed temporary name, and one with our first name.
        std::fs::write(dir.join(".plan.json.tmp"), "mine").unwrap();
        let first = dir.join(format!(".plan.json.memplan-{}-0.tmp", std::process::id()));
        std::fs::write(&first, "also mine").unwrap();
        let staged = Staged::write(&target, b"{}").unwrap();
        assert_ne!(staged.temp, first);
        staged.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"{}");
        assert_eq!(std::fs::read(dir.join(".plan.json.tmp")).unwrap(), b"mine");
        assert_eq!(std::fs::read(&first).unwrap(), b"also mine");
        // Staged and dropped without a commit: removed.
        let staged = Staged::write(&target, b"[]").unwrap();
        let temp = staged.temp.clone();
        assert!(temp.exists());
        drop(staged);
        assert!(!temp.exists());
        assert_eq!(std::fs::read(&target).unwrap(), b"{}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_target_that_cannot_be_created_leaves_nothing() {
        let dir = scratch("parent");
        let file = dir.join("a_file");
        std::fs::write(&file, "keep").unwrap();
        let failure = write_new(&file.join("out.csv"), b"x").unwrap_err();
        assert!(failure.message.starts_with("error: cannot write "), "{}", failure.message);
        let failure = write_report_files(&file.join("out"), &[(Emit::Text, "report".into())]).unwrap_err();
        assert!(failure.message.contains("cannot write "), "{}", failure.message);
        assert_eq!(names(&dir), ["a_file"]);
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
