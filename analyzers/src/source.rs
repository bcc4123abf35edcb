//! Which Python frame is the user's: the line a user would edit.

use serde::{Deserialize, Serialize};
use tpuscope_core::Trace;

/// A place in the user's source.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SourceLoc {
    pub file: String,
    pub line: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub function: String,
}

impl SourceLoc {
    /// `dir/file.py:33 (function)`, or the place alone when the function is unknown.
    pub fn with_function(&self) -> String {
        if self.function.is_empty() {
            self.to_string()
        } else {
            format!("{self} ({})", self.function)
        }
    }
}

impl std::fmt::Display for SourceLoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", short_path(&self.file), self.line)
    }
}

/// The last two components of a path: enough to recognise a file in a one-line message.
pub fn short_path(path: &str) -> &str {
    let mut cut = path.len();
    for _ in 0..2 {
        match path[..cut].rfind('/') {
            Some(i) => cut = i,
            None => return path,
        }
    }
    &path[cut + 1..]
}

/// Path pieces of frontends checked out from source (editable installs) rather than installed
/// in site-packages. Directory names alone (`jax/`, `torch/`) are not enough: users keep their
/// own scripts in folders named like that.
const FRAMEWORK_SOURCE_MARKERS: &[&str] = &[
    "/jax/_src/",
    "/jaxlib/",
    "/torch_xla/core/",
    "/torch_xla/_internal/",
    "/torch_xla/distributed/",
    "/torch/_dynamo/",
    "/torch/nn/modules/",
    "/torch_tpu/_",
    "/tpuscope_agent/",
];

/// Whose code a Python frame is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameClass {
    /// The user's own code: the lines a user edits.
    User,
    /// A library installed next to the frontend (flax, optax, transformers, …): code the user
    /// calls but does not edit.
    Library,
    /// The frontend itself (jax, torch, torch_xla, torch_tpu) or tpuscope's agent.
    Frontend,
    /// The interpreter's standard library and synthetic frames (`<frozen runpy>`).
    Stdlib,
}

/// Installed packages that are the frontends themselves, as path pieces after `site-packages/`.
const FRONTEND_PACKAGES: &[&str] = &[
    "jax/",
    "jaxlib/",
    "jax_plugins/",
    "torch/",
    "torch_xla/",
    "torch_tpu/",
    "libtpu/",
    "tpuscope_agent/",
];

/// Classifies the file of a frame.
pub fn frame_class(file: &str) -> FrameClass {
    if file.is_empty() || file.starts_with('<') {
        return FrameClass::Stdlib;
    }
    let installed = ["/site-packages/", "/dist-packages/"]
        .iter()
        .find_map(|m| file.find(m).map(|i| &file[i + m.len()..]));
    if let Some(rest) = installed {
        return if FRONTEND_PACKAGES.iter().any(|p| rest.starts_with(p)) {
            FrameClass::Frontend
        } else {
            FrameClass::Library
        };
    }
    if FRAMEWORK_SOURCE_MARKERS.iter().any(|m| file.contains(m)) {
        return FrameClass::Frontend;
    }
    if file.contains("/lib/python3") {
        return FrameClass::Stdlib;
    }
    FrameClass::User
}

/// True for frames inside the frontends, site-packages, the standard library or the agent.
pub fn is_framework_file(file: &str) -> bool {
    if file.is_empty() || file.starts_with('<') {
        // `<frozen importlib._bootstrap>`, `<string>`: never a line to edit.
        return true;
    }
    if file.contains("/site-packages/") || file.contains("/dist-packages/") {
        return true;
    }
    if file.contains("/lib/python3") {
        // The interpreter's standard library (e.g. /usr/lib/python3.11/threading.py).
        return true;
    }
    FRAMEWORK_SOURCE_MARKERS.iter().any(|m| file.contains(m))
}

/// The innermost user frame of an interned stack (frames are stored innermost first).
pub fn user_frame(trace: &Trace, stack: u32) -> Option<SourceLoc> {
    let def = trace.stacks.get(&stack)?;
    def.frames.iter().find_map(|f| {
        let file = trace.string(f.file);
        (!is_framework_file(file)).then(|| SourceLoc {
            file: file.to_string(),
            line: f.line,
            function: trace.string(f.function).to_string(),
        })
    })
}

/// The innermost frame of an interned stack, whoever's code it is.
pub fn innermost_frame(trace: &Trace, stack: u32) -> Option<SourceLoc> {
    let f = trace.stacks.get(&stack)?.frames.first()?;
    Some(SourceLoc {
        file: trace.string(f.file).to_string(),
        line: f.line,
        function: trace.string(f.function).to_string(),
    })
}

/// The innermost library frame (flax, transformers, …: not the frontend) between the event and
/// the user's frame: where a library did what the user's call asked for. `None` when the user's
/// line called the frontend directly.
pub fn library_frame(trace: &Trace, stack: u32) -> Option<SourceLoc> {
    let def = trace.stacks.get(&stack)?;
    for f in &def.frames {
        let file = trace.string(f.file);
        match frame_class(file) {
            FrameClass::User => return None,
            FrameClass::Library => {
                return Some(SourceLoc {
                    file: file.to_string(),
                    line: f.line,
                    function: trace.string(f.function).to_string(),
                });
            }
            FrameClass::Frontend | FrameClass::Stdlib => {}
        }
    }
    None
}

/// The innermost frame outside the frontend (the user's or a library's): the code that called
/// into the frontend.
pub fn outside_frame(trace: &Trace, stack: u32) -> Option<SourceLoc> {
    let def = trace.stacks.get(&stack)?;
    def.frames.iter().find_map(|f| {
        let file = trace.string(f.file);
        matches!(frame_class(file), FrameClass::User | FrameClass::Library).then(|| SourceLoc {
            file: file.to_string(),
            line: f.line,
            function: trace.string(f.function).to_string(),
        })
    })
}

/// One frame of a Python stack: where it is, and whether it is the user's code (not a
/// frontend's, an installed library's or Python's: [`is_framework_file`]), decided here once for
/// every view. In JSON it is the line `file:line function`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackFrame {
    pub file: String,
    pub line: u32,
    pub function: String,
    pub user: bool,
}

impl StackFrame {
    pub fn new(file: String, line: u32, function: String) -> StackFrame {
        let user = !is_framework_file(&file);
        StackFrame {
            file,
            line,
            function,
            user,
        }
    }

    /// `dir/file.py:33 function`: the short form a view shows.
    pub fn short(&self) -> String {
        format!("{}:{} {}", short_path(&self.file), self.line, self.function)
            .trim_end()
            .to_string()
    }

    /// Reads back the JSON's line (`file:line function`); `None` when it is not one.
    pub fn parse(line: &str) -> Option<StackFrame> {
        let (place, function) = line.rsplit_once(' ')?;
        let (file, no) = place.rsplit_once(':')?;
        Some(StackFrame::new(
            file.to_string(),
            no.parse().ok()?,
            function.to_string(),
        ))
    }
}

/// `file:line function`, the file's path whole.
impl std::fmt::Display for StackFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} {}", self.file, self.line, self.function)
    }
}

impl Serialize for StackFrame {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StackFrame {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<StackFrame, D::Error> {
        let line = String::deserialize(d)?;
        StackFrame::parse(&line)
            .ok_or_else(|| serde::de::Error::custom(format!("not a stack frame: {line:?}")))
    }
}

/// The whole stack, innermost first.
pub fn stack_frames(trace: &Trace, stack: u32) -> Vec<StackFrame> {
    trace
        .stacks
        .get(&stack)
        .map(|def| {
            def.frames
                .iter()
                .map(|f| {
                    StackFrame::new(
                        trace.string(f.file).to_string(),
                        f.line,
                        trace.string(f.function).to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_frames_are_lines_in_json_and_short_with_their_kind_in_views() {
        let f =
            StackFrame::parse("/root/venv/lib/python3.11/site-packages/jax/_src/pjit.py:139 run")
                .unwrap();
        assert_eq!(f.short(), "_src/pjit.py:139 run");
        assert!(!f.user);
        let f = StackFrame::parse("/work/main/tests/workloads/jax_lr.py:36 main").unwrap();
        assert_eq!(f.short(), "workloads/jax_lr.py:36 main");
        assert!(f.user);
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(json, r#""/work/main/tests/workloads/jax_lr.py:36 main""#);
        assert_eq!(serde_json::from_str::<StackFrame>(&json).unwrap(), f);
        // A path with a space, a frame without a function name.
        let f = StackFrame::new("/my code/t.py".into(), 7, String::new());
        assert_eq!(StackFrame::parse(&f.to_string()), Some(f));
        assert!(serde_json::from_str::<StackFrame>(r#""no place""#).is_err());
    }

    #[test]
    fn framework_frames_are_recognised() {
        for f in [
            "/root/.cache/tpuscope/envs/jax/lib/python3.11/site-packages/jax/_src/pjit.py",
            "/usr/lib/python3.11/threading.py",
            "<frozen runpy>",
            "/src/torch_xla/torch_xla/core/xla_model.py",
            "/src/jax/jax/_src/pjit.py",
            "",
        ] {
            assert!(is_framework_file(f), "{f}");
        }
        for f in [
            "/work/main/examples/jax/lr_python_float.py",
            "train.py",
            "/home/me/jaxlike/train.py",
            "/work/main/examples/torch_xla/step_index_slice.py",
        ] {
            assert!(!is_framework_file(f), "{f}");
        }
    }

    #[test]
    fn frames_are_classed_by_whose_code_they_are() {
        use FrameClass::*;
        for (f, want) in [
            ("/v/lib/python3.11/site-packages/jax/_src/pjit.py", Frontend),
            (
                "/v/lib/python3.11/site-packages/torch_xla/core/xla_model.py",
                Frontend,
            ),
            (
                "/v/lib/python3.11/site-packages/flax/linen/linear.py",
                Library,
            ),
            (
                "/v/lib/python3.11/site-packages/transformers/masking_utils.py",
                Library,
            ),
            (
                "/v/lib/python3.11/site-packages/jaxtyping/_decorator.py",
                Library,
            ),
            (
                "/home/u/.cache/tpuscope/0.1.0/python/tpuscope_agent/frontends.py",
                Frontend,
            ),
            ("/usr/lib/python3.11/threading.py", Stdlib),
            ("<frozen runpy>", Stdlib),
            ("/home/me/jax/train.py", User),
            ("train.py", User),
        ] {
            assert_eq!(frame_class(f), want, "{f}");
        }
    }

    #[test]
    fn short_paths_keep_two_components() {
        assert_eq!(short_path("/a/b/c/train.py"), "c/train.py");
        assert_eq!(short_path("c/train.py"), "c/train.py");
        assert_eq!(short_path("train.py"), "train.py");
    }
}
