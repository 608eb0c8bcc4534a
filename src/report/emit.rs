//! `memplan plan FILE --emit FORMATS -o DIR`: the report files and where they go.
//!
//! Each format has ONE fixed file name (docs/REPORTS.md), so a directory holds at most one
//! plan's files and a script always knows where to look:
//!
//! | format | file        |
//! |--------|-------------|
//! | text   | report.txt  |
//! | json   | plan.json   |
//! | svg    | arena.svg   |
//! | trace  | trace.json  |
//! | csv    | buffers.csv |
//!
//! The overwrite rule: memplan writes only files with these names, replacing an earlier
//! run's; it never deletes, renames or writes any other file in DIR. It refuses (and writes
//! nothing) when DIR exists but is not a directory, or when one of the names it is about to
//! write is something other than a regular file (a directory or a symbolic link, which
//! could point at a file that is not ours). Each file is written to a temporary name
//! (`.NAME.tmp`) and renamed into place, so a reader never sees half a file.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use thiserror::Error;

use crate::report::{Report, Subject, csv, json, svg, text, trace};

/// An emitted format.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Emit {
    Text,
    Json,
    Svg,
    Trace,
    Csv,
}

impl Emit {
    pub const ALL: [Emit; 5] = [Emit::Text, Emit::Json, Emit::Svg, Emit::Trace, Emit::Csv];

    /// The name `--emit` takes.
    pub fn name(self) -> &'static str {
        match self {
            Emit::Text => "text",
            Emit::Json => "json",
            Emit::Svg => "svg",
            Emit::Trace => "trace",
            Emit::Csv => "csv",
        }
    }

    /// The file it is written to, inside the output directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Emit::Text => "report.txt",
            Emit::Json => "plan.json",
            Emit::Svg => "arena.svg",
            Emit::Trace => "trace.json",
            Emit::Csv => "buffers.csv",
        }
    }

    /// The file's contents for `subject` (`report` is `Report::new` of it; `top` is the
    /// text report's number of live values listed at the peak).
    pub fn render(self, subject: &Subject, report: &Report, top: usize) -> String {
        match self {
            Emit::Text => text::render(report, top),
            Emit::Json => json::render(subject, report),
            Emit::Svg => svg::render(subject, report),
            Emit::Trace => trace::render(subject, report),
            Emit::Csv => csv::render(&subject.plan),
        }
    }
}

impl FromStr for Emit {
    type Err = String;

    fn from_str(s: &str) -> Result<Emit, String> {
        Emit::ALL.into_iter().find(|e| e.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Emit::ALL.iter().map(|e| e.name()).collect();
            format!("unknown format `{s}`; the formats are {}", names.join(", "))
        })
    }
}

/// Why the files could not be written.
#[derive(Debug, Error)]
pub enum EmitError {
    /// The output path exists and is not a directory.
    #[error("{} exists and is not a directory; -o names the directory the files go in", path.display())]
    NotADirectory { path: PathBuf },
    /// A file memplan would write exists as something other than a regular file.
    #[error("{} exists and is not a regular file (a directory or a link); memplan writes only regular files it names itself", path.display())]
    NotAFile { path: PathBuf },
    /// Creating the directory or writing a file failed.
    #[error("cannot write {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// Writes each `(format, contents)` to its file in `dir` (created if missing), following
/// the overwrite rule of the module docs; returns the paths written, in order.
pub fn write(dir: &Path, outputs: &[(Emit, String)]) -> Result<Vec<PathBuf>, EmitError> {
    match std::fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => return Err(EmitError::NotADirectory { path: dir.to_path_buf() }),
        Ok(_) => {}
        Err(_) => std::fs::create_dir_all(dir).map_err(|source| EmitError::Io { path: dir.to_path_buf(), source })?,
    }
    let targets: Vec<(PathBuf, PathBuf)> = outputs
        .iter()
        .map(|(emit, _)| (dir.join(emit.file_name()), dir.join(format!(".{}.tmp", emit.file_name()))))
        .collect();
    for path in targets.iter().flat_map(|(path, temp)| [path, temp]) {
        if let Ok(meta) = std::fs::symlink_metadata(path)
            && !meta.file_type().is_file()
        {
            return Err(EmitError::NotAFile { path: path.clone() });
        }
    }
    let mut written = Vec::with_capacity(outputs.len());
    for ((path, temp), (_, contents)) in targets.into_iter().zip(outputs) {
        let io = |source| EmitError::Io { path: path.clone(), source };
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
    fn names_parse_back_and_files_are_distinct() {
        for emit in Emit::ALL {
            assert_eq!(emit.name().parse::<Emit>(), Ok(emit));
        }
        let mut files: Vec<&str> = Emit::ALL.iter().map(|e| e.file_name()).collect();
        files.sort();
        files.dedup();
        assert_eq!(files.len(), Emit::ALL.len());
        assert!("png".parse::<Emit>().unwrap_err().contains("text, json, svg, trace, csv"));
    }
}
