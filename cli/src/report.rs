//! The CLI's one reporting layer (spec README 'Terminal output hygiene'):
//! every message and report `lazaret` prints as text goes through here with
//! its control characters escaped (`lazaret_runtime::display`), so a name
//! Lazaret did not choose (a workspace path, a directory under
//! `.git/modules`, a file named in an error, a coordinator's refusal) cannot
//! drive the terminal. A diagnostic is one line: a line break inside it is
//! escaped too. A report Lazaret composes keeps its own line breaks, and the
//! names in it are escaped where they are put in (`escape_path`). JSON is
//! printed as serde_json writes it, with the DEL and C1 characters it leaves
//! raw escaped as `\u00NN`.
//!
//! The session's own output is not text of Lazaret's: it is streamed byte
//! for byte through the output filter (`effects::coordinator::client`).
//! `tests::nothing_prints_around_the_reporting_layer` keeps the print
//! macros and direct stdout/stderr writes out of the rest of the CLI.
use lazaret_runtime::display::{escape_controls, escape_json_text, escape_line};
use std::fmt;
use std::io::{self, Write};

/// Prints one diagnostic line to stderr, every control escaped (line breaks
/// included). A failed write is not reported: there is nowhere to report it.
pub fn eprint_line(line: fmt::Arguments<'_>) {
    let _ = write_line(&mut io::stderr().lock(), line);
}

/// Prints one line to stdout, every control escaped.
pub fn print_line(line: fmt::Arguments<'_>) {
    let _ = write_line(&mut io::stdout().lock(), line);
}

/// Writes one line, every control escaped, then a newline.
pub fn write_line(out: &mut dyn Write, line: fmt::Arguments<'_>) -> io::Result<()> {
    let text = line.to_string();
    out.write_all(escape_line(&text).as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Writes a report Lazaret composed: controls escaped but `\n` and `\t`.
pub fn write_text(out: &mut dyn Write, text: &str) -> io::Result<()> {
    out.write_all(escape_controls(text).as_bytes())?;
    out.flush()
}

/// Writes JSON text that serde_json produced.
pub fn write_json(out: &mut dyn Write, json: &str) -> io::Result<()> {
    out.write_all(escape_json_text(json).as_bytes())?;
    out.flush()
}

/// Whether stderr is a terminal: progress is shown only there.
pub fn stderr_is_terminal() -> bool {
    use std::io::IsTerminal;
    io::stderr().is_terminal()
}

/// How a progress line is put on the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressLine {
    /// A line that stays as written.
    Whole,
    /// The start of a line later rewritten in place.
    Open,
    /// Replaces the open line.
    Rewrite,
    /// Ends the open line.
    Close,
}

/// Writes progress to stderr, controls escaped; [`ProgressLine::Rewrite`]
/// returns to the line's start and clears it first.
pub fn eprint_progress(line: &str, how: ProgressLine) {
    let mut err = io::stderr().lock();
    let text = escape_line(line);
    let _ = match how {
        ProgressLine::Whole => writeln!(err, "{text}"),
        ProgressLine::Open => write!(err, "{text}"),
        ProgressLine::Rewrite => write!(err, "\r\x1b[K{text}"),
        ProgressLine::Close => writeln!(err),
    };
    let _ = err.flush();
}

/// Writes a report to stderr (see [`write_text`]): what a command shows
/// before its question when stdout carries JSON.
pub fn eprint_text(text: &str) {
    let _ = write_text(&mut io::stderr().lock(), text);
}

/// Asks `question` on stderr (controls escaped, no newline) and reads one
/// line of answer from stdin.
pub fn prompt(question: &str) -> io::Result<String> {
    let mut err = io::stderr().lock();
    err.write_all(escape_line(question).as_bytes())?;
    err.flush()?;
    drop(err);
    let mut answer = String::new();
    io::stdin().read_line(&mut answer)?;
    Ok(answer)
}

/// Writes a report to stdout (see [`write_text`]).
pub fn print_text(text: &str) -> io::Result<()> {
    write_text(&mut io::stdout().lock(), text)
}

/// Writes JSON to stdout (see [`write_json`]).
pub fn print_json(json: &str) -> io::Result<()> {
    write_json(&mut io::stdout().lock(), json)
}

/// `eprintln!` through the reporting layer: one escaped line on stderr.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::report::eprint_line(format_args!($($arg)*))
    };
}

/// `println!` through the reporting layer: one escaped line on stdout.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::report::print_line(format_args!($($arg)*))
    };
}

pub(crate) use {errln, outln};

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    #[test]
    fn lines_reports_and_json_are_escaped_for_the_terminal() -> io::Result<()> {
        let name = "ws/evil\x1b]0;x\x07\nlazaret: fake\u{9b}2J";
        let mut out = Vec::new();
        write_line(&mut out, format_args!("lazaret: error: {name}: missing"))?;
        assert_eq!(
            String::from_utf8_lossy(&out),
            "lazaret: error: ws/evil\\x1b]0;x\\x07\\nlazaret: fake\\u{9b}2J: missing\n"
        );
        let mut out = Vec::new();
        write_text(&mut out, &format!("line one\n\tworkspace {name}\n"))?;
        assert_eq!(
            String::from_utf8_lossy(&out),
            "line one\n\tworkspace ws/evil\\x1b]0;x\\x07\nlazaret: fake\\u{9b}2J\n"
        );
        let json = serde_json::json!({ "workspace": name }).to_string();
        let mut out = Vec::new();
        write_json(&mut out, &json)?;
        let text = String::from_utf8_lossy(&out);
        assert!(!text.contains(char::is_control), "{text}");
        let back: serde_json::Value = serde_json::from_slice(&out)?;
        assert_eq!(back["workspace"], name);
        Ok(())
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// Everything the CLI prints as text goes through this module: no other
    /// file of `cli/src` uses a print macro or writes to stdout or stderr
    /// directly, outside its tests. The launch hands stdout and stderr to
    /// the session, whose bytes the output filter passes on.
    #[test]
    fn nothing_prints_around_the_reporting_layer() {
        const FORBIDDEN: &[&str] = &[
            "println!",
            "print!",
            "eprintln!",
            "eprint!",
            "std::io::stdout()",
            "std::io::stderr()",
            "io::stdout()",
            "io::stderr()",
            "dbg!",
        ];
        /// (file, the only line allowed to contain the token): the session
        /// stream of a launch.
        const ALLOWED: &[(&str, &str)] = &[
            ("cmd_launch.rs", "&mut std::io::stdout(),"),
            ("cmd_launch.rs", "&mut std::io::stderr(),"),
            // The developer prompt's echo: the session's terminal.
            ("cmd_launch.rs", "echo: Box::new(std::io::stdout()),"),
            ("cmd_launch.rs", "std::io::stdout().is_terminal()"),
            ("cmd_launch.rs", "std::io::stderr().is_terminal()"),
        ];
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        assert!(
            files.len() > 10,
            "found {} files under {}",
            files.len(),
            src.display()
        );
        let mut offending = Vec::new();
        for file in &files {
            if file.ends_with("report.rs") {
                continue;
            }
            let text = std::fs::read_to_string(file).unwrap_or_default();
            let name = file
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            // Tests sit at the end of a file, after `#[cfg(test)]`.
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (number, line) in code.lines().enumerate() {
                let line = line.trim();
                if line.starts_with("//") {
                    continue;
                }
                let allowed = ALLOWED.iter().any(|(f, l)| *f == name && line.contains(l));
                if !allowed && FORBIDDEN.iter().any(|t| line.contains(t)) {
                    offending.push(format!("{}:{}: {line}", file.display(), number + 1));
                }
            }
        }
        assert!(
            offending.is_empty(),
            "prints around cli/src/report.rs:\n{}",
            offending.join("\n")
        );
    }
}
