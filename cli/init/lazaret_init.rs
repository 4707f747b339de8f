//! lazaret-init: the sandbox's PID 1 (spec 3.1). A static binary with no
//! ELF interpreter (built by cli/build.rs with `+crt-static` and a static
//! relocation model); it uses only std and three glibc calls.
//!
//! - It reaps every child (HOST-NOTES: a non-reaping PID 1 piles up zombies
//!   and `runsc delete -force` times out).
//! - Its stdin is the Runtime Supervisor's lifetime pipe: EOF means RS wants
//!   the sandbox stopped (or RS is gone), so init exits and `runsc run`
//!   deletes the container.
//! - SIGTERM ends it too (`runsc kill`).
use std::io::Read;
use std::time::Duration;

const SIGTERM: i32 = 15;
const ECHILD: i32 = 10;

extern "C" {
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
    fn _exit(code: i32) -> !;
}

extern "C" fn on_term(_signal: i32) {
    // SAFETY: _exit is async-signal-safe and takes no pointers.
    unsafe { _exit(128 + SIGTERM) }
}

fn main() {
    // SAFETY: installs a handler that only calls the async-signal-safe
    // _exit; the function pointer stays valid for the process's life.
    unsafe {
        signal(SIGTERM, on_term);
    }
    std::thread::spawn(|| {
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 256];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        std::process::exit(0);
    });
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid, writable i32 for the whole call.
        let reaped = unsafe { waitpid(-1, &mut status, 0) };
        if reaped < 0 && std::io::Error::last_os_error().raw_os_error() == Some(ECHILD) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
