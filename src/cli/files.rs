//! Files in and out. memplan never overwrites or deletes a file it did not name itself:
//! - inputs are read whole ([`read_text`], [`read_bytes`]);
//! - an output a user names (`alloc -o`, `schedule -o`, `remat -o`, `run --save`) must not
//!   exist: [`refuse_existing`] says so before any work is done, and [`write_new`] creates
//!   the file only if it still does not exist when written;
//! - `plan --emit` writes memplan's own fixed names into a directory ([`write_report_files`]):
//!   it replaces an earlier run's files of those names and never deletes, renames or
//!   writes any other file there. It refuses (and writes nothing) when the directory path
//!   exists but is not a directory, or when one of the names it is about to write is
//!   something other than a regular file (a directory or a symbolic link, which could
//!   point at a file that is not ours). Each file is written to a temporary name
//!   (`.NAME.tmp`) and renamed into place, so a reader never sees half a file.

use std::io::Write;
use std::path::{Path, PathBuf};

use memplan::formats::emit::Emit;

use super::Failure;

/// The text of the file at `path`.
pub fn read_text(path: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(path).map_err(|e| Failure::bad_input(format_args!("cannot read {}: {e}", path.display())))
}

/// The bytes of the file at `path`.
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure::bad_input(format_args!("{}: cannot read: {e}", path.display())))
}

/// `Err` if `path` exists: an output is refused before any work is done.
pub fn refuse_existing(path: &Path) -> Result<(), Failure> {
    if path.exists() {
        return Err(Failure::bad_input(format_args!("{} exists; memplan never overwrites a file", path.display())));
    }
    Ok(())
}

/// Writes `bytes` to a NEW file at `path` (an existing file, even one made since
/// [`refuse_existing`] looked, is refused, never overwritten).
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let written = std::fs::OpenOptions::new().write(true).create_new(true).open(path).and_then(|mut f| f.write_all(bytes));
    written.map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => {
            Failure::bad_input(format_args!("{} exists; memplan never overwrites a file", path.display()))
        }
        _ => Failure::bad_input(format_args!("cannot write {}: {e}", path.display())),
    })
}

/// Writes each `(format, contents)` to its file in `dir` (created if missing), as the
/// module docs say; returns the paths written, in order.
pub fn write_report_files(dir: &Path, outputs: &[(Emit, String)]) -> Result<Vec<PathBuf>, Failure> {
    match std::fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => {
            return Err(Failure::bad_input(format_args!(
                "{} exists and is not a directory; -o names the directory the files go in",
                dir.display()
            )));
        }
        Ok(_) => {}
        Err(_) => std::fs::create_dir_all(dir).map_err(|e| Failure::bad_input(format_args!("cannot write {}: {e}", dir.display())))?,
    }
    let targets: Vec<(PathBuf, PathBuf)> = outputs
        .iter()
        .map(|(emit, _)| (dir.join(emit.file_name()), dir.join(format!(".{}.tmp", emit.file_name()))))
        .collect();
    for path in targets.iter().flat_map(|(path, temp)| [path, temp]) {
        if let Ok(meta) = std::fs::symlink_metadata(path)
            && !meta.file_type().is_file()
        {
            return Err(Failure::bad_input(format_args!(
                "{} exists and is not a regular file (a directory or a link); memplan writes only regular files it names itself",
                path.display()
            )));
        }
    }
    let mut written = Vec::with_capacity(outputs.len());
    for ((path, temp), (_, contents)) in targets.into_iter().zip(outputs) {
        let io = |e: std::io::Error| Failure::bad_input(format_args!("cannot write {}: {e}", path.display()));
        std::fs::write(&temp, contents).map_err(io)?;
        std::fs::rename(&temp, &path).map_err(io)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_file_is_written_once_and_never_overwritten() {
        let dir = std::env::temp_dir().join(format!("memplan-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.txt");
        let _ = std::fs::remove_file(&path);
        assert!(refuse_existing(&path).is_ok());
        write_new(&path, b"first").unwrap();
        for refused in [refuse_existing(&path).unwrap_err(), write_new(&path, b"second").unwrap_err()] {
            assert!(refused.message.contains("exists; memplan never overwrites a file"), "{}", refused.message);
        }
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
