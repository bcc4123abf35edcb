//! `TPUSCOPE_FAULT_SPEC`: which calls fail or slow down.
//!
//! A comma-separated list of `kind:action@calls`:
//! - kind: `compile` (`PJRT_Client_Compile` and `PJRT_Compile`), `execute`, `h2d`
//!   (`PJRT_Client_BufferFromHostBuffer`), `to_host` (real copies: `PJRT_Buffer_ToHostBuffer`
//!   with a destination, and `PJRT_Buffer_CopyRawToHost`; size queries are not numbered),
//!   `serialize`, `deserialize`, `memory_stats` (`PJRT_Device_MemoryStats`);
//! - action: `error`, `oom` (RESOURCE_EXHAUSTED with libtpu's out-of-memory text) or `delay_ms=K`;
//! - calls: `N` (the Nth call of that kind, 1-based), `N-M` (inclusive), or `*` (every call).
//!
//! Example: `compile:error@2,execute:error@5-6,execute:delay_ms=30@*`.

use std::fmt;

/// The call kinds a rule can target; each is numbered separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Compile,
    Execute,
    H2d,
    ToHost,
    Serialize,
    Deserialize,
    MemoryStats,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::Compile,
        Kind::Execute,
        Kind::H2d,
        Kind::ToHost,
        Kind::Serialize,
        Kind::Deserialize,
        Kind::MemoryStats,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Compile => "compile",
            Kind::Execute => "execute",
            Kind::H2d => "h2d",
            Kind::ToHost => "to_host",
            Kind::Serialize => "serialize",
            Kind::Deserialize => "deserialize",
            Kind::MemoryStats => "memory_stats",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Error,
    /// Fails like a device out of memory.
    Oom,
    DelayMs(u64),
}

/// Which calls of a kind a rule applies to (1-based, inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Calls {
    All,
    Range(u64, u64),
}

impl Calls {
    fn contains(self, n: u64) -> bool {
        match self {
            Calls::All => true,
            Calls::Range(a, b) => a <= n && n <= b,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub kind: Kind,
    pub action: Action,
    pub calls: Calls,
}

/// A rule that did not parse.
#[derive(Debug, PartialEq, Eq)]
pub struct SpecError {
    pub item: String,
    pub why: &'static str,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad rule '{}': {}", self.item, self.why)
    }
}

/// What to do with the `n`th call of a kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Sum of the matching delays.
    pub delay_ms: u64,
    /// Fail the call instead of forwarding it (after the delay).
    pub error: bool,
    /// Fail it as out of device memory.
    pub oom: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    pub rules: Vec<Rule>,
}

impl Spec {
    /// Parses the whole list; empty items (e.g. a trailing comma) are ignored.
    pub fn parse(text: &str) -> Result<Spec, SpecError> {
        let mut rules = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            rules.push(parse_rule(item)?);
        }
        Ok(Spec { rules })
    }

    pub fn decide(&self, kind: Kind, n: u64) -> Decision {
        let mut d = Decision::default();
        for r in self
            .rules
            .iter()
            .filter(|r| r.kind == kind && r.calls.contains(n))
        {
            match r.action {
                Action::Error => d.error = true,
                Action::Oom => {
                    d.error = true;
                    d.oom = true;
                }
                Action::DelayMs(ms) => d.delay_ms = d.delay_ms.saturating_add(ms),
            }
        }
        d
    }

    /// Whether any rule targets `kind` (hooks of other kinds skip the lookup).
    pub fn targets(&self, kind: Kind) -> bool {
        self.rules.iter().any(|r| r.kind == kind)
    }
}

fn parse_rule(item: &str) -> Result<Rule, SpecError> {
    let bad = |why| SpecError {
        item: item.to_string(),
        why,
    };
    let (kind, rest) = item
        .split_once(':')
        .ok_or_else(|| bad("expected kind:action@calls"))?;
    let kind = Kind::parse(kind.trim()).ok_or_else(|| {
        bad("unknown kind (compile, execute, h2d, to_host, serialize, deserialize)")
    })?;
    let (action, calls) = rest
        .split_once('@')
        .ok_or_else(|| bad("missing @calls (N, N-M or *)"))?;
    let action = match action.trim() {
        "error" => Action::Error,
        "oom" => Action::Oom,
        a => match a.split_once('=') {
            Some((k, ms)) if k.trim() == "delay_ms" => {
                Action::DelayMs(ms.trim().parse().map_err(|_| bad("bad delay_ms"))?)
            }
            _ => return Err(bad("unknown action (error, oom or delay_ms=K)")),
        },
    };
    let calls = match calls.trim() {
        "*" => Calls::All,
        c => {
            let (a, b) = c.split_once('-').unwrap_or((c, c));
            let a: u64 = a.trim().parse().map_err(|_| bad("bad call number"))?;
            let b: u64 = b.trim().parse().map_err(|_| bad("bad call number"))?;
            if a == 0 || b < a {
                return Err(bad("calls are numbered from 1 and N-M needs N <= M"));
            }
            Calls::Range(a, b)
        }
    };
    Ok(Rule {
        kind,
        action,
        calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_is_an_error_that_says_so() {
        let s = Spec::parse("execute:oom@3").unwrap();
        let d = s.decide(Kind::Execute, 3);
        assert!(d.error && d.oom);
        assert_eq!(s.decide(Kind::Execute, 2), Decision::default());
    }

    #[test]
    fn parses_the_documented_example() {
        let s = Spec::parse(
            "compile:error@2,execute:error@5-6,execute:delay_ms=30@*,to_host:error@1,deserialize:error@*",
        )
        .unwrap();
        assert_eq!(s.rules.len(), 5);
        assert_eq!(
            s.rules[1],
            Rule {
                kind: Kind::Execute,
                action: Action::Error,
                calls: Calls::Range(5, 6)
            }
        );
        assert_eq!(s.decide(Kind::Compile, 1), Decision::default());
        assert!(s.decide(Kind::Compile, 2).error);
        assert!(!s.decide(Kind::Compile, 3).error);
        let d = s.decide(Kind::Execute, 5);
        assert_eq!(
            d,
            Decision {
                delay_ms: 30,
                error: true,
                oom: false
            }
        );
        assert_eq!(s.decide(Kind::Execute, 7).delay_ms, 30);
        assert!(!s.decide(Kind::Execute, 7).error);
        assert!(s.decide(Kind::Deserialize, 1000).error);
        assert!(s.targets(Kind::ToHost));
        assert!(!s.targets(Kind::H2d));
    }

    #[test]
    fn empty_and_spaces() {
        assert!(Spec::parse("").unwrap().rules.is_empty());
        let s = Spec::parse(" h2d : delay_ms = 5 @ 3 ,").unwrap();
        assert_eq!(s.decide(Kind::H2d, 3).delay_ms, 5);
        assert_eq!(s.decide(Kind::H2d, 2).delay_ms, 0);
    }

    #[test]
    fn rejects_bad_rules() {
        for bad in [
            "compile",
            "compiles:error@1",
            "compile:error",
            "compile:boom@1",
            "compile:error@0",
            "compile:error@3-2",
            "compile:error@x",
            "compile:delay_ms=abc@1",
        ] {
            assert!(Spec::parse(bad).is_err(), "{bad} should not parse");
        }
    }
}
