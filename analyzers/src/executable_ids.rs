//! Executable ids made unique over a run. The collector names an executable by its address,
//! and a plugin hands a destroyed executable's address to a later one: a loop that builds a new
//! `jax.jit` per learning rate drops the old one, torch_xla's graph cache evicts, and the next
//! compile may get the freed address. A long run does this many times. Read naively, the new
//! executable's launches would count as the first one's (its graph, call site and compile).
//!
//! So each definition (compile, load, cache load, identification after `attach`) of an id
//! that is already defined stands for a new executable: it gets an id of its own, and a
//! reference (a launch, a summary of launches, a cache store, a load's source) made from the
//! time that executable exists (its definition returned) on takes it. By time, not by place in
//! the file: the collector's threads write their records in batches, so a launch of the old
//! executable may come after the new one's compile in the file.

use rustc_hash::{FxHashMap, FxHashSet};
use tpuscope_core::event::Record;

/// The top bit marks an id given here (no user-space address has it); the next 15 bits count
/// the definitions of the same address.
const GIVEN: u64 = 1 << 63;
const NTH_SHIFT: u32 = 48;
const NTH_MAX: u64 = (1 << 15) - 1;

/// The ids of a run's executables, as its records define and reference them in file order.
#[derive(Clone, Debug, Default)]
pub struct ExecutableIds {
    /// Every id defined so far.
    defined: FxHashSet<u64>,
    /// For an id defined more than once: from when each later definition holds, and the id it
    /// was given, in order of time.
    later: FxHashMap<u64, Vec<(u64, u64)>>,
}

impl ExecutableIds {
    /// The executable a launch of `id` at `t_ns` ran: most of a run's records are launches,
    /// so this costs one test until an address is reused.
    #[inline]
    pub fn launched(&self, id: u64, t_ns: u64) -> u64 {
        if self.later.is_empty() {
            return id;
        }
        self.resolve(id, t_ns).unwrap_or(id)
    }

    /// `r` as the analyses read it: `None` when it keeps its ids (every record of a run whose
    /// executables never shared an address), else a copy with its ids made unique.
    pub fn apply(&mut self, r: &Record) -> Option<Record> {
        let (id, from) = match r {
            Record::Compile(c) => (c.executable_id, c.t_ns.saturating_add(c.dur_ns)),
            Record::CacheLoad(l) => (l.executable_id, l.t_ns.saturating_add(l.dur_ns)),
            // Identified at its first launch after the attach, inside that launch's call.
            Record::ExecutableSeen(x) => (x.executable_id, x.t_ns),
            // Both a definition and a reference (the compile-only executable it loads).
            Record::Load(l) => {
                let source = self.resolve(l.source_executable_id, l.t_ns);
                let id = self.define(l.executable_id, l.t_ns.saturating_add(l.dur_ns));
                if id.is_none() && source.is_none() {
                    return None;
                }
                let mut l = l.clone();
                l.executable_id = id.unwrap_or(l.executable_id);
                l.source_executable_id = source.unwrap_or(l.source_executable_id);
                return Some(Record::Load(l));
            }
            _ => return self.resolved(r),
        };
        let given = self.define(id, from)?;
        Some(with_id(r, given))
    }

    /// `r`, a record that refers to an executable (a launch, a summary of launches, a cache
    /// store), with the id it refers to made unique: `None` when it keeps it. Also for a record
    /// read back on its own once the run was read (a view shows one record from the file); a
    /// definition is kept whole among the digest's records, so it is read from there.
    pub fn resolved(&self, r: &Record) -> Option<Record> {
        let (id, t) = match r {
            Record::Execute(e) => (e.executable_id, e.t_ns),
            Record::ExecuteSummary(s) => (s.executable_id, s.t_start_ns),
            Record::CacheStore(s) => (s.executable_id, s.t_ns),
            _ => return None,
        };
        Some(with_id(r, self.resolve(id, t)?))
    }

    /// A definition of `id` holding from `from`: `None` for its first, else the id given to it.
    fn define(&mut self, id: u64, from: u64) -> Option<u64> {
        if id == 0 || self.defined.insert(id) {
            return None;
        }
        let nth = self.later.get(&id).map_or(0, Vec::len) as u64 + 1;
        let given = GIVEN | (nth.min(NTH_MAX) << NTH_SHIFT) | (id & ((1 << NTH_SHIFT) - 1));
        self.hold(id, from, given);
        Some(given)
    }

    /// Notes that `id` stands for `given` from time `from` on.
    fn hold(&mut self, id: u64, from: u64, given: u64) {
        let later = self.later.entry(id).or_default();
        let at = later.partition_point(|&(t, _)| t <= from);
        later.insert(at, (from, given));
    }

    /// The ids given to later definitions, for a saved digest: (address, from, given).
    pub(crate) fn given(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let mut ids: Vec<_> = self.later.iter().collect();
        ids.sort_unstable_by_key(|&(&id, _)| id);
        ids.into_iter()
            .flat_map(|(&id, v)| v.iter().map(move |&(from, given)| (id, from, given)))
    }

    /// What [`ExecutableIds::given`] gave, read back (enough to resolve references).
    pub(crate) fn from_given(given: impl IntoIterator<Item = (u64, u64, u64)>) -> ExecutableIds {
        let mut ids = ExecutableIds::default();
        for (id, from, g) in given {
            ids.defined.insert(id);
            ids.hold(id, from, g);
        }
        ids
    }

    /// What `id` stands for at time `t`: `None` when it is still its first definition.
    #[inline]
    fn resolve(&self, id: u64, t: u64) -> Option<u64> {
        if self.later.is_empty() {
            return None;
        }
        let later = self.later.get(&id)?;
        let at = later.partition_point(|&(from, _)| from <= t);
        later.get(at.checked_sub(1)?).map(|&(_, given)| given)
    }
}

/// A copy of `r` naming executable `id` (for the kinds [`ExecutableIds`] reads).
fn with_id(r: &Record, id: u64) -> Record {
    let mut r = r.clone();
    match &mut r {
        Record::Compile(c) => c.executable_id = id,
        Record::CacheLoad(l) => l.executable_id = id,
        Record::ExecutableSeen(x) => x.executable_id = id,
        Record::Execute(e) => e.executable_id = id,
        Record::ExecuteSummary(s) => s.executable_id = id,
        Record::CacheStore(s) => s.executable_id = id,
        _ => {}
    }
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tpuscope_core::event::{Compile, Execute};

    fn compile(t_ns: u64, dur_ns: u64, id: u64) -> Record {
        Record::Compile(Box::new(Compile {
            t_ns,
            dur_ns,
            executable_id: id,
            ..Compile::default()
        }))
    }

    fn execute(t_ns: u64, id: u64) -> Record {
        Record::Execute(Execute {
            t_ns,
            executable_id: id,
            ..Execute::default()
        })
    }

    fn id_of(r: &Record) -> u64 {
        match r {
            Record::Compile(c) => c.executable_id,
            Record::Execute(e) => e.executable_id,
            _ => 0,
        }
    }

    #[test]
    fn a_reused_address_is_a_new_executable_from_when_its_compile_returned() {
        let mut ids = ExecutableIds::default();
        let read = |ids: &mut ExecutableIds, r: Record| {
            let given = ids.apply(&r);
            id_of(given.as_ref().unwrap_or(&r))
        };
        assert_eq!(read(&mut ids, compile(10, 5, 0x7f00)), 0x7f00);
        assert_eq!(read(&mut ids, execute(20, 0x7f00)), 0x7f00);
        // The address again: compiled 100..130.
        let second = read(&mut ids, compile(100, 30, 0x7f00));
        assert_ne!(second, 0x7f00);
        assert_ne!(second & GIVEN, 0);
        // A launch of the old one written late (during the new compile) keeps the old id.
        assert_eq!(read(&mut ids, execute(110, 0x7f00)), 0x7f00);
        assert_eq!(read(&mut ids, execute(140, 0x7f00)), second);
        // Another address is untouched, and a third definition gets an id of its own.
        assert_eq!(read(&mut ids, execute(150, 0x8000)), 0x8000);
        let third = read(&mut ids, compile(200, 1, 0x7f00));
        assert!(third != second && third != 0x7f00);
        assert_eq!(read(&mut ids, execute(300, 0x7f00)), third);
        assert_eq!(read(&mut ids, execute(150, 0x7f00)), second);
        // A failed compile (id 0) defines nothing.
        assert!(ids.apply(&compile(400, 1, 0)).is_none());
    }

    #[test]
    fn a_record_read_back_alone_is_resolved_as_the_run_was_read() {
        let mut ids = ExecutableIds::default();
        for r in [compile(10, 5, 9), compile(100, 30, 9)] {
            ids.apply(&r);
        }
        let given = ids.apply(&execute(140, 9)).map(|r| id_of(&r)).unwrap();
        let saved = ExecutableIds::from_given(ids.given());
        for table in [&ids, &saved] {
            assert_eq!(
                table.resolved(&execute(140, 9)).map(|r| id_of(&r)),
                Some(given)
            );
            assert!(table.resolved(&execute(20, 9)).is_none());
            // A definition read back alone is not made anew.
            assert!(table.resolved(&compile(100, 30, 9)).is_none());
        }
    }

    #[test]
    fn a_run_without_reuse_is_read_as_it_is() {
        let mut ids = ExecutableIds::default();
        for r in [
            compile(1, 1, 5),
            execute(3, 5),
            compile(4, 1, 6),
            execute(9, 6),
        ] {
            assert!(ids.apply(&r).is_none());
        }
    }
}
