//! The one program of the end-to-end suites' distroless image: a static
//! binary (no interpreter, no shell in the image), compiled by
//! `support::distroless_image`.
//!
//! - `hold NAME`: writes its PID to `/workspace/NAME`, then waits until
//!   `/workspace/done` exists.
//! - `group PGID`: prints `left PID` for every guest process in group PGID.
//! - `exists PATH`: prints `present` or `absent`.
//! - `hex PATH`: prints the file's bytes as lowercase hex.
//! - `write PATH`: tries to open the file for writing; prints `written` or
//!   `refused ERROR`.
//! - `scan MASK LABEL=MASKED...`: searches every regular file of the
//!   sandbox's view (not `/proc`, `/sys`, `/dev`) and every process's
//!   environment and command line for each secret (its masked hex XOR the
//!   mask: the secrets themselves are never in this program's argv), raw
//!   and as hex text; prints `found LABEL PATH` per hit, `unreadable PATH`
//!   for a directory or file outside `/proc` it cannot read, then
//!   `scanned N`.
use std::path::{Path, PathBuf};
use std::time::Duration;

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Every regular file beneath `dir` (symbolic links not followed), except
/// the kernel's pseudo file systems.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        println!("unreadable {}", dir.display());
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if ["/proc", "/sys", "/dev"].iter().any(|p| path == Path::new(p)) {
            continue;
        }
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(&path, out),
            Ok(t) if t.is_file() => out.push(path),
            _ => {}
        }
    }
}

fn scan(mask: &str, secrets: &[&str]) {
    let mask = unhex(mask);
    let secrets: Vec<(String, Vec<u8>, Vec<u8>)> = secrets
        .iter()
        .map(|s| {
            let (label, masked) = s.split_once('=').expect("LABEL=MASKED");
            let raw: Vec<u8> = unhex(masked).iter().zip(&mask).map(|(a, b)| a ^ b).collect();
            let text = hex(&raw).into_bytes();
            (label.to_owned(), raw, text)
        })
        .collect();
    let mut files = Vec::new();
    walk(Path::new("/"), &mut files);
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if entry.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            files.push(entry.path().join("environ"));
            files.push(entry.path().join("cmdline"));
        }
    }
    let mut scanned = 0;
    for file in &files {
        let Ok(data) = std::fs::read(file) else {
            // A process that exited since the listing is not a finding.
            if !file.starts_with("/proc") {
                println!("unreadable {}", file.display());
            }
            continue;
        };
        scanned += 1;
        for (label, raw, text) in &secrets {
            if contains(&data, raw) || contains(&data, text) {
                println!("found {label} {}", file.display());
            }
        }
    }
    println!("scanned {scanned}");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["hold", name] => {
            std::fs::write(format!("/workspace/{name}"), std::process::id().to_string())
                .expect("write the PID file");
            // Bounded: the suites end every hold well within ten minutes.
            for _ in 0..6000 {
                if Path::new("/workspace/done").exists() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            std::process::exit(3);
        }
        ["group", pgid] => {
            for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
                let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
                let Some((_, tail)) = stat.rsplit_once(')') else { continue };
                // After ')': state ppid pgrp.
                if tail.split_whitespace().nth(2) == Some(*pgid) {
                    println!("left {}", entry.file_name().to_string_lossy());
                }
            }
        }
        ["exists", path] => {
            let found = std::fs::symlink_metadata(path).is_ok();
            println!("{}", if found { "present" } else { "absent" });
        }
        ["hex", path] => println!("{}", hex(&std::fs::read(path).expect("read the file"))),
        ["write", path] => match std::fs::OpenOptions::new().write(true).open(path) {
            Ok(_) => println!("written"),
            Err(e) => println!("refused {e}"),
        },
        ["scan", mask, secrets @ ..] => scan(mask, secrets),
        _ => {
            eprintln!("usage: hold NAME | group PGID | exists PATH | hex PATH | write PATH | scan MASK LABEL=MASKED...");
            std::process::exit(2);
        }
    }
}
