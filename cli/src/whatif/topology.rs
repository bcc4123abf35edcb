//! What `tpuscope whatif` is asked to compile for, checked before anything compiles: the TPU
//! topology's name (a generation libtpu knows, a slice shape that generation has) and the libtpu
//! (a regular file that loads, exports `GetPjrtApi`, carries libtpu's TPU topology extension,
//! creates the topology and compiles one addition for it: libtpu's own answer, from one child
//! process, since libtpu aborts or dies of SIGFPE on shapes it does not have instead of
//! returning an error).
//!
//! Names are case-insensitive: `V5E:2X2` is `v5e:2x2` (libtpu itself refuses upper case, and a
//! name has one meaning whatever its case); the report says the lower-case name.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tpuscope_pjrt::compile_only::Topology;

use crate::child::{self, RunError};

/// A TPU generation as libtpu names it, with the slice shapes it has.
pub struct Generation {
    /// The name tpuscope says (`v5e`).
    pub name: &'static str,
    /// Other names a user may give it (`v5litepod`, the Cloud's name for v5e).
    aliases: &'static [&'static str],
    /// Chips along each axis of a slice: 2 (a 2-D torus) or 3.
    dims: usize,
    /// The slices there are (from the Cloud TPU documentation's tables).
    shapes: Shapes,
    /// HBM per chip, GiB, when libtpu does not say it (from the Cloud TPU documentation).
    pub hbm_gib: u64,
}

enum Shapes {
    /// Exactly these.
    Listed(&'static [&'static [u32]]),
    /// These small ones, then whole 4×4×4 cubes (every axis a multiple of 4) up to this many
    /// chips.
    Cubes {
        small: &'static [&'static [u32]],
        max_chips: u64,
    },
}

const SMALL_3D: &[&[u32]] = &[&[2, 2, 1], &[2, 2, 2], &[2, 2, 4], &[2, 4, 4]];

/// The generations libtpu 0.0.52 takes by these names (an unknown one is "Invalid TPU external
/// name"; `v5litepod` is the Cloud's name for v5e, which libtpu does not take); the Cloud TPU
/// documentation's slice shapes and HBM per chip (docs.cloud.google.com/tpu/docs/v2, v3, v4,
/// v5e, v5p, v6e). libtpu itself creates shapes no generation has (v5e:64x64) and aborts on
/// the first compile for them.
pub const GENERATIONS: &[Generation] = &[
    Generation {
        name: "v2",
        aliases: &[],
        dims: 2,
        shapes: Shapes::Listed(&[&[2, 2], &[4, 4], &[4, 8], &[8, 8], &[8, 16], &[16, 16]]),
        hbm_gib: 16,
    },
    Generation {
        name: "v3",
        aliases: &[],
        dims: 2,
        shapes: Shapes::Listed(&[
            &[2, 2],
            &[4, 4],
            &[4, 8],
            &[8, 8],
            &[8, 16],
            &[16, 16],
            &[16, 32],
            &[32, 32],
        ]),
        hbm_gib: 32,
    },
    Generation {
        name: "v4",
        aliases: &[],
        dims: 3,
        shapes: Shapes::Cubes {
            small: SMALL_3D,
            max_chips: 4096,
        },
        hbm_gib: 32,
    },
    Generation {
        name: "v5e",
        aliases: &["v5litepod"],
        dims: 2,
        shapes: Shapes::Listed(SLICES_2D),
        hbm_gib: 16,
    },
    Generation {
        name: "v5p",
        aliases: &[],
        dims: 3,
        shapes: Shapes::Cubes {
            small: SMALL_3D,
            max_chips: 6144,
        },
        hbm_gib: 95,
    },
    Generation {
        name: "v6e",
        aliases: &[],
        dims: 2,
        shapes: Shapes::Listed(SLICES_2D),
        hbm_gib: 32,
    },
];

/// v5e's and v6e's slices: up to a 16×16 pod.
const SLICES_2D: &[&[u32]] = &[
    &[1, 1],
    &[2, 2],
    &[2, 4],
    &[4, 4],
    &[4, 8],
    &[8, 8],
    &[8, 16],
    &[16, 16],
];

/// A topology name that passed [`parse`]: its generation and shape.
pub struct TopologyName {
    pub generation: &'static Generation,
    pub shape: Vec<u32>,
}

impl TopologyName {
    /// The name as libtpu takes it and the report says it: `v5e:2x2`.
    pub fn canonical(&self) -> String {
        let shape: Vec<String> = self.shape.iter().map(u32::to_string).collect();
        format!("{}:{}", self.generation.name, shape.join("x"))
    }
}

/// The generation of a topology name, when it names one tpuscope knows (any case).
pub fn generation_of(topology: &str) -> Option<&'static Generation> {
    let name = topology.split(':').next()?.to_ascii_lowercase();
    GENERATIONS
        .iter()
        .find(|g| g.name == name || g.aliases.contains(&name.as_str()))
}

/// Reads `GENERATION:SHAPE` (`v5e:2x2`, `v4:2x2x1`; any case): `Err` is one line naming what is
/// wrong and what is accepted.
pub fn parse(text: &str) -> Result<TopologyName, String> {
    let generations = || {
        GENERATIONS
            .iter()
            .map(|g| g.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some((generation, shape)) = text.split_once(':') else {
        return Err(format!(
            "topology {text:?}: expected GENERATION:SHAPE, e.g. v5e:2x2 or v4:2x2x1"
        ));
    };
    let Some(generation) = generation_of(generation) else {
        return Err(format!(
            "topology {text:?}: unknown TPU generation {generation:?} (known: {})",
            generations()
        ));
    };
    let dims: Option<Vec<u32>> = shape
        .to_ascii_lowercase()
        .split('x')
        .map(|d| d.parse::<u32>().ok())
        .collect();
    let example = generation.example();
    let Some(dims) = dims.filter(|d| d.len() == generation.dims) else {
        return Err(format!(
            "topology {text:?}: a {} shape is {} numbers joined by x, e.g. {example}",
            generation.name, generation.dims
        ));
    };
    if dims.contains(&0) {
        return Err(format!(
            "topology {text:?}: a slice has at least one chip along each axis, e.g. {example}"
        ));
    }
    let name = TopologyName {
        generation,
        shape: dims,
    };
    if !generation.has(&name.shape) {
        return Err(format!(
            "topology {text:?}: {} has no {} slice ({})",
            generation.name,
            name.shape
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join("x"),
            generation.shapes_said()
        ));
    }
    Ok(name)
}

impl Generation {
    fn has(&self, shape: &[u32]) -> bool {
        match &self.shapes {
            Shapes::Listed(list) => list.contains(&shape),
            Shapes::Cubes { small, max_chips } => {
                let chips: u64 = shape.iter().map(|&n| u64::from(n)).product();
                small.contains(&shape) || (shape.iter().all(|n| n % 4 == 0) && chips <= *max_chips)
            }
        }
    }

    fn example(&self) -> String {
        let first = match &self.shapes {
            Shapes::Listed(list) => list.get(1).or(list.first()),
            Shapes::Cubes { small, .. } => small.first(),
        };
        let shape: Vec<String> = first
            .map(|s| s.iter().map(u32::to_string).collect())
            .unwrap_or_default();
        format!("{}:{}", self.name, shape.join("x"))
    }

    /// The shapes there are, in words.
    fn shapes_said(&self) -> String {
        let join = |list: &[&[u32]]| {
            list.iter()
                .map(|s| s.iter().map(u32::to_string).collect::<Vec<_>>().join("x"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match &self.shapes {
            Shapes::Listed(list) => format!("its slices: {}", join(list)),
            Shapes::Cubes { small, max_chips } => format!(
                "its slices: {}, or every axis a multiple of 4 up to {max_chips} chips",
                join(small)
            ),
        }
    }
}

/// The program the check compiles: one addition on one device.
const PROBE_PROGRAM: &str = "module @tpuscope_topology_check {
  func.func public @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}
";

/// What libtpu says a topology is (the up-front check's answer).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TopologyFacts {
    pub chips: u32,
    /// The first device's kind (`TPU v5 lite`).
    pub device_kind: String,
}

/// The line of the child's stdout that carries its answer (libtpu may print too).
const MARKER: &str = "tpuscope-topology: ";
/// libtpu is several hundred MB: loading it takes seconds on a slow disk.
const CHECK_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Default, Serialize, Deserialize)]
struct Answer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    facts: Option<TopologyFacts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Arguments of the hidden `tpuscope __whatif-topology`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[arg(long)]
    pub libtpu: std::path::PathBuf,
    #[arg(long)]
    pub topology: String,
}

/// The libtpu at `path` as a file, before anything loads it: it exists and is a regular file
/// (symlinks followed). `Err` is one line.
pub fn check_libtpu_file(path: &Path) -> Result<(), String> {
    let shown = path.display();
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "libtpu {shown}: no such file (pass --libtpu the path of libtpu.so, e.g. from `python -c 'import libtpu; print(libtpu.get_library_path())'`)"
        )),
        Err(e) => Err(format!("libtpu {shown}: cannot read it: {e}")),
        Ok(m) if m.is_dir() => Err(format!(
            "libtpu {shown}: a directory, not a library (pass --libtpu the path of libtpu.so)"
        )),
        Ok(m) if !m.is_file() => Err(format!(
            "libtpu {shown}: not a regular file (pass --libtpu the path of libtpu.so)"
        )),
        Ok(_) => Ok(()),
    }
}

/// Has a child `tpuscope __whatif-topology` load `libtpu` and create `topology` (a name [`parse`]
/// gave): what libtpu says it is, or one line saying why not (the library is not libtpu, libtpu
/// refuses the topology, or the child crashed doing it). Must be called from the `tpuscope`
/// binary: the child is `current_exe()`.
pub fn check_with_libtpu(libtpu: &Path, topology: &str) -> Result<TopologyFacts, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find tpuscope itself: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("__whatif-topology")
        .arg("--libtpu")
        .arg(libtpu)
        .arg("--topology")
        .arg(topology);
    super::replay::libtpu_env(&mut cmd);
    let shown = libtpu.display();
    let child = child::run(&mut cmd, CHECK_TIMEOUT).map_err(|e| match e {
        RunError::Spawn(e) => format!("cannot start tpuscope to check libtpu {shown}: {e}"),
        RunError::TimedOut(d) => format!(
            "libtpu {shown} did not create topology {topology} within {} s (killed)",
            d.as_secs()
        ),
    })?;
    let answer = child
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix(MARKER))
        .and_then(|j| serde_json::from_str::<Answer>(j).ok());
    match answer {
        Some(Answer { facts: Some(f), .. }) => Ok(f),
        Some(Answer { error: Some(e), .. }) => Err(e),
        _ => Err(format!(
            "libtpu {shown} crashed on topology {topology}: {}",
            super::replay::crash_line(&child.status, &child.stderr, "process checking it")
        )),
    }
}

/// `tpuscope __whatif-topology`: loads libtpu in this process, creates the topology, prints the
/// answer as one JSON line after [`MARKER`].
pub fn check_cmd(args: &CheckArgs) -> anyhow::Result<i32> {
    let answer = match facts_here(&args.libtpu, &args.topology) {
        Ok(f) => Answer {
            facts: Some(f),
            error: None,
        },
        Err(e) => Answer {
            facts: None,
            error: Some(e),
        },
    };
    println!("{MARKER}{}", serde_json::to_string(&answer)?);
    Ok(0)
}

/// The child's work: load, check it is libtpu, initialize, create the topology, read its devices,
/// compile one addition for it.
fn facts_here(libtpu: &Path, topology: &str) -> Result<TopologyFacts, String> {
    let shown = libtpu.display();
    let (d, _) = tpuscope_pjrt::probe::load_driver(libtpu)
        .map_err(|e| format!("libtpu {shown}: {e} (pass --libtpu the path of libtpu.so)"))?;
    if !tpuscope_pjrt::probe::is_libtpu(&d) {
        return Err(format!(
            "libtpu {shown}: a PJRT plugin, but not libtpu (no TPU topology extension; the XLA CPU plugin is not one): pass --libtpu the path of libtpu.so"
        ));
    }
    d.plugin_initialize().map_err(|e| {
        format!(
            "libtpu {shown} does not initialize: {}",
            super::replay::first_line(&e.message)
        )
    })?;
    let topo = Topology::create(d, topology).map_err(|e| {
        format!(
            "libtpu {shown} cannot create topology {topology}: {}",
            super::replay::first_line(&e.message)
        )
    })?;
    let device_kind = topo
        .device_kind()
        .map_err(|e| format!("topology {topology}: its devices: {}", e.message))?
        .unwrap_or_default();
    // libtpu creates topologies it cannot compile for (v5e:64x64), and aborts on the first
    // compile: a program of one addition finds out here, once.
    topo.compile(
        "mlir",
        PROBE_PROGRAM.as_bytes(),
        tpuscope_pjrt::driver::SINGLE_DEVICE_COMPILE_OPTIONS,
    )
    .map_err(|e| {
        format!(
            "libtpu {shown} cannot compile for topology {topology}: {}",
            super::replay::first_line(&e.message)
        )
    })?;
    Ok(TopologyFacts {
        chips: topo
            .chips()
            .ok()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        device_kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_in_any_case_and_said_in_lower_case() {
        assert_eq!(parse("v5e:2x2").unwrap().canonical(), "v5e:2x2");
        assert_eq!(parse("V5E:2X2").unwrap().canonical(), "v5e:2x2");
        assert_eq!(parse("v5litepod:2x4").unwrap().canonical(), "v5e:2x4");
        assert_eq!(parse("v4:2x2x1").unwrap().shape, [2, 2, 1]);
        assert_eq!(parse("v5p:4x4x8").unwrap().canonical(), "v5p:4x4x8");
        assert_eq!(parse("v6e:16x16").unwrap().canonical(), "v6e:16x16");
    }

    #[test]
    fn bad_names_say_what_is_wrong_and_what_is_accepted() {
        let err = |t: &str| parse(t).err().unwrap();
        assert_eq!(
            err("v5e"),
            "topology \"v5e\": expected GENERATION:SHAPE, e.g. v5e:2x2 or v4:2x2x1"
        );
        assert_eq!(
            err("v99:2x2"),
            "topology \"v99:2x2\": unknown TPU generation \"v99\" (known: v2, v3, v4, v5e, v5p, v6e)"
        );
        assert_eq!(
            err("v5e:0x0"),
            "topology \"v5e:0x0\": a slice has at least one chip along each axis, e.g. v5e:2x2"
        );
        assert_eq!(
            err("v5e:3x3"),
            "topology \"v5e:3x3\": v5e has no 3x3 slice (its slices: 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16)"
        );
        assert!(err("v5e:64x64").contains("v5e has no 64x64 slice"));
        assert_eq!(
            err("v5e:2x2x1"),
            "topology \"v5e:2x2x1\": a v5e shape is 2 numbers joined by x, e.g. v5e:2x2"
        );
        assert!(err("v4:2x2").contains("a v4 shape is 3 numbers joined by x, e.g. v4:2x2x1"));
        assert!(err("v5p:4x4x6").contains(
            "v5p has no 4x4x6 slice (its slices: 2x2x1, 2x2x2, 2x2x4, 2x4x4, or every axis a multiple of 4 up to 6144 chips)"
        ));
        assert!(err("v5p:16x16x32").contains("no 16x16x32 slice"));
        assert!(err("v5e:2x-2").contains("2 numbers joined by x"));
        assert!(err("v5e:").contains("2 numbers joined by x"));
    }
}
