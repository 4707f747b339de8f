//! The one program of the end-to-end suites' distroless image: a static
//! binary (no interpreter, no shell in the image), compiled by
//! `support::distroless_image`.
//!
//! - `hold NAME`: writes its PID to `/workspace/NAME`, then waits until
//!   `/workspace/done` exists.
//! - `group PGID`: prints `left PID` for every guest process in group PGID.
//! - `exists PATH`: prints `present` or `absent`.
use std::path::Path;
use std::time::Duration;

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
        _ => {
            eprintln!("usage: hold NAME | group PGID | exists PATH");
            std::process::exit(2);
        }
    }
}
