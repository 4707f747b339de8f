//! What can be seen of a live Domain without its store: the Domain Store is
//! opened only by the Host Coordinator holding the flock (spec 3.6, FR-17),
//! so `lazaret state` shows who holds the lock (from `/proc/locks`) and what
//! the runtime directory holds (socket, diagnostic log, generation
//! directories). Nothing is opened for writing and nothing is connected to.
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The runtime side of a located Domain (absent with `--domain-root`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimePaths {
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
}

/// What a live Domain shows from outside its store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveView {
    /// PIDs (in this process's PID namespace) holding the flock; `None`
    /// when `/proc/locks` or the lock file cannot be read.
    pub lock_holders: Option<Vec<u32>>,
    pub socket_present: bool,
    pub log_present: bool,
    /// `gen-N` entries of the runtime directory, sorted.
    pub generation_dirs: Vec<String>,
}

/// The lock file's key as `/proc/locks` prints it: device major and minor
/// in hex, then the inode (`MAJ:MIN:INO`).
fn lock_key(lock: &Path) -> Option<String> {
    let meta = std::fs::metadata(lock).ok()?;
    let dev = meta.dev();
    Some(format!(
        "{:02x}:{:02x}:{}",
        rustix::fs::major(dev),
        rustix::fs::minor(dev),
        meta.ino()
    ))
}

/// The PIDs holding an active (not waiting, `->`) `FLOCK` on the file whose
/// `/proc/locks` key is `key`. Lines look like
/// `1: FLOCK  ADVISORY  WRITE 4242 00:1f:1234 0 EOF`.
pub fn flock_holders(proc_locks: &str, key: &str) -> Vec<u32> {
    let mut out: Vec<u32> = proc_locks
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_ascii_whitespace().skip(1);
            if fields.next()? != "FLOCK" {
                return None;
            }
            let pid = fields.nth(2)?.parse().ok()?;
            (fields.next()? == key).then_some(pid)
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

fn generation_dirs(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<(u64, String)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n = name.strip_prefix("gen-")?.parse().ok()?;
            Some((n, name))
        })
        .collect();
    names.sort_unstable();
    names.into_iter().map(|(_, name)| name).collect()
}

/// `/proc/locks` in one read where possible. The kernel walks its lock list
/// afresh for every read, so a file read in small pieces (as
/// `read_to_string` does) can skip an entry when other locks come and go
/// between pieces — seen once under the full test suite's load. Bounded at
/// 16 MiB.
fn read_proc_locks() -> Option<String> {
    use std::io::Read as _;
    const MAX: usize = 16 << 20;
    let mut file = std::fs::File::open("/proc/locks").ok()?;
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0;
    loop {
        let n = file.read(&mut buf[len..]).ok()?;
        if n == 0 {
            break;
        }
        len += n;
        if len == buf.len() {
            if buf.len() >= MAX {
                break;
            }
            buf.resize(buf.len() * 2, 0);
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).ok()
}

/// Observes a live Domain: read-only stats and directory listing.
pub fn observe(lock: &Path, runtime: Option<&RuntimePaths>) -> LiveView {
    let lock_holders =
        lock_key(lock).and_then(|key| read_proc_locks().map(|text| flock_holders(&text, &key)));
    let exists = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    LiveView {
        lock_holders,
        socket_present: runtime.is_some_and(|r| exists(&r.socket)),
        log_present: runtime.is_some_and(|r| exists(&r.log)),
        generation_dirs: runtime.map_or_else(Vec::new, |r| generation_dirs(&r.dir)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flock_holders_are_the_active_flocks_on_exactly_that_file() {
        let text = "\
1: POSIX  ADVISORY  WRITE 77 00:1f:1234 0 EOF
2: FLOCK  ADVISORY  WRITE 4242 00:1f:1234 0 EOF
2: -> FLOCK  ADVISORY  WRITE 5000 00:1f:1234 0 EOF
3: FLOCK  ADVISORY  WRITE 4243 00:1f:12345 0 EOF
4: FLOCK  ADVISORY  WRITE 4244 fd:01:1234 0 EOF
5: OFDLCK ADVISORY  READ  -1 00:1f:1234 0 EOF
garbage
";
        assert_eq!(flock_holders(text, "00:1f:1234"), vec![4242]);
        assert_eq!(flock_holders(text, "fd:01:1234"), vec![4244]);
        assert!(flock_holders(text, "00:20:1").is_empty());
    }
}
