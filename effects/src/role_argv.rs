//! The argument form shared by Lazaret's hidden role subcommands (the
//! broker's `__wrapper`, the exec client's `__enter`): `--name value` pairs
//! from a fixed list, then `--`, then a non-empty target argument vector.
//! Parsing is bounded by the argument count; every refusal names the
//! argument and what was wrong.
use std::ffi::OsString;

/// Which argument was refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgProblem {
    pub argument: &'static str,
    pub problem: String,
}

fn problem(argument: &'static str, problem: &str) -> ArgProblem {
    ArgProblem {
        argument,
        problem: problem.to_owned(),
    }
}

/// The named values, in the order of `names`, and the target command.
#[derive(Debug)]
pub struct NamedArgs<const N: usize> {
    names: [&'static str; N],
    values: [Option<String>; N],
    pub target: Vec<OsString>,
}

impl<const N: usize> NamedArgs<N> {
    pub fn parse(argv: &[OsString], names: [&'static str; N]) -> Result<Self, ArgProblem> {
        let mut values: [Option<String>; N] = std::array::from_fn(|_| None);
        let mut i = 0;
        loop {
            let Some(arg) = argv.get(i) else {
                return Err(problem("--", "missing before the target command"));
            };
            if arg == "--" {
                break;
            }
            let Some(slot) = names.iter().position(|n| arg == n) else {
                return Err(problem("(unknown)", &format!("unexpected {arg:?}")));
            };
            let value = argv
                .get(i + 1)
                .and_then(|v| v.to_str())
                .ok_or_else(|| problem(names[slot], "missing or non-UTF-8 value"))?;
            values[slot] = Some(value.to_owned());
            i += 2;
        }
        let target = argv[i + 1..].to_vec();
        if target.is_empty() {
            return Err(problem("TARGET", "the target command is empty"));
        }
        Ok(Self {
            names,
            values,
            target,
        })
    }

    /// The name of value `k`, for the caller's own refusals.
    pub fn name(&self, k: usize) -> &'static str {
        self.names[k]
    }

    /// Value `k`, which is required.
    pub fn get(&self, k: usize) -> Result<&str, ArgProblem> {
        self.values[k]
            .as_deref()
            .ok_or_else(|| problem(self.names[k], "is required"))
    }

    /// Value `k` as an unsigned integer.
    pub fn number(&self, k: usize) -> Result<u64, ArgProblem> {
        self.get(k)?
            .parse()
            .map_err(|e| problem(self.names[k], &format!("not an unsigned integer: {e}")))
    }

    /// A refusal of value `k` found by the caller.
    pub fn refuse(&self, k: usize, what: &str) -> ArgProblem {
        problem(self.names[k], what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn values_then_target() {
        let a = NamedArgs::parse(
            &argv(&["--b", "2", "--a", "x", "--", "t", "u"]),
            ["--a", "--b"],
        )
        .expect("valid");
        assert_eq!(a.get(0), Ok("x"));
        assert_eq!(a.number(1), Ok(2));
        assert_eq!(a.target, argv(&["t", "u"]));
    }

    #[test]
    fn refusals_name_the_argument() {
        let names = ["--a", "--b"];
        let refused = |words: &[&str]| NamedArgs::parse(&argv(words), names).map(|_| ());
        assert_eq!(refused(&["--a", "x"]).unwrap_err().argument, "--");
        assert_eq!(
            refused(&["--c", "x", "--", "t"]).unwrap_err().argument,
            "(unknown)"
        );
        assert_eq!(refused(&["--a"]).unwrap_err().argument, "--a");
        assert_eq!(refused(&["--a", "x", "--"]).unwrap_err().argument, "TARGET");
        let a = NamedArgs::parse(&argv(&["--a", "x", "--", "t"]), names).expect("valid");
        assert_eq!(a.get(1).unwrap_err().argument, "--b");
        assert_eq!(a.number(0).unwrap_err().argument, "--a");
    }
}
