//! TLA+ names to Rust names.

const KEYWORDS: &[&str] = &[
    "as", "break", "const", "continue", "crate", "else", "enum", "extern", "false", "fn", "for",
    "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
    "self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where",
    "while", "async", "await", "dyn", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen",
];

/// Names the generated code uses for itself; TLA+ locals that clash get a suffix.
const RESERVED_LOCALS: &[&str] = &["cx", "st", "next", "out", "mask", "action", "at_base"];

/// `fooBar_baz` -> `foo_bar_baz`.
pub fn snake(name: &str) -> String {
    let mut out = String::new();
    let mut prev_lower = false;
    for ch in name.chars() {
        if ch.is_ascii_uppercase() {
            if prev_lower {
                out.push('_');
            }
            out.push(ch.to_ascii_lowercase());
            prev_lower = false;
        } else if ch.is_ascii_alphanumeric() {
            out.push(ch);
            prev_lower = ch.is_ascii_lowercase() || ch.is_ascii_digit();
        } else {
            if !out.ends_with('_') {
                out.push('_');
            }
            prev_lower = false;
        }
    }
    let out = out.trim_matches('_').to_string();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        return format!("v_{out}");
    }
    out
}

/// `foo_bar`, `fooBar`, `not-ready` -> `FooBar`, `NotReady`.
pub fn camel(name: &str) -> String {
    let mut out = String::new();
    let mut up = true;
    for ch in name.chars() {
        if ch.is_ascii_alphanumeric() {
            if up {
                out.push(ch.to_ascii_uppercase());
            } else {
                out.push(ch);
            }
            up = false;
        } else {
            up = true;
        }
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        return format!("V{out}");
    }
    out
}

/// A Rust local or field for a TLA+ name.
pub fn local(name: &str) -> String {
    let s = snake(name);
    if KEYWORDS.contains(&s.as_str()) || RESERVED_LOCALS.contains(&s.as_str()) {
        return format!("{s}_");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        assert_eq!(snake("domainLock"), "domain_lock");
        assert_eq!(snake("MaxGen"), "max_gen");
        assert_eq!(camel("not-ready"), "NotReady");
        assert_eq!(camel("phase"), "Phase");
        assert_eq!(local("type"), "type_");
        assert_eq!(local("st"), "st_");
    }
}
