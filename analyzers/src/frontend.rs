//! The Python frontend that drove a run: a type, so that every analysis and view asks it the
//! same questions rather than matching names.

use serde::{Deserialize, Serialize};

/// The frontend the agent named, else the one whose package the process loaded. In JSON its
/// name (`jax`, `torch_xla`, `torch_tpu`, another name as recorded, or empty when unknown).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Frontend {
    Jax,
    TorchXla,
    TorchTpu,
    /// Named so by the trace, but not a frontend tpuscope knows by name.
    Other(String),
    #[default]
    Unknown,
}

impl Frontend {
    pub fn from_name(name: &str) -> Frontend {
        match name {
            "" => Frontend::Unknown,
            "jax" => Frontend::Jax,
            "torch_xla" => Frontend::TorchXla,
            "torch_tpu" => Frontend::TorchTpu,
            other => Frontend::Other(other.to_string()),
        }
    }

    /// Its name as traces and the JSON say it (empty when unknown).
    pub fn name(&self) -> &str {
        match self {
            Frontend::Jax => "jax",
            Frontend::TorchXla => "torch_xla",
            Frontend::TorchTpu => "torch_tpu",
            Frontend::Other(name) => name,
            Frontend::Unknown => "",
        }
    }

    /// JAX (or a frontend named as one of its flavours): `jax.jit` advice applies.
    pub fn is_jax(&self) -> bool {
        match self {
            Frontend::Jax => true,
            Frontend::Other(name) => name.starts_with("jax"),
            _ => false,
        }
    }

    /// A PyTorch frontend (torch_xla, TorchTPU, or one named as a flavour of torch): `.item()`
    /// and dynamo advice applies.
    pub fn is_torch(&self) -> bool {
        match self {
            Frontend::TorchXla | Frontend::TorchTpu => true,
            Frontend::Other(name) => name.starts_with("torch"),
            _ => false,
        }
    }
}

impl Serialize for Frontend {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Frontend {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Frontend, D::Error> {
        Ok(Frontend::from_name(&String::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_kinds_follow_them() {
        for name in ["jax", "torch_xla", "torch_tpu", "", "keras"] {
            let f = Frontend::from_name(name);
            assert_eq!(f.name(), name);
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(serde_json::from_str::<Frontend>(&json).unwrap(), f);
        }
        assert!(Frontend::Jax.is_jax() && !Frontend::Jax.is_torch());
        assert!(Frontend::TorchTpu.is_torch() && Frontend::TorchXla.is_torch());
        assert!(Frontend::from_name("torch_neuron").is_torch());
        assert!(!Frontend::Unknown.is_jax() && !Frontend::Unknown.is_torch());
    }
}
