//! Two listings side by side, aligned the way a user compares two recompiles: computation by
//! computation, instruction by instruction where the structure is the same, else by a line diff
//! in which instruction numbering (`%add.12` vs `%add.19`) does not count as a difference.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::ops::Range;

use similar::{Algorithm, DiffTag, capture_diff_slices};
use tpuscope_core::hlo::{self, HloComputationProto, HloModuleProto};
use xxhash_rust::xxh3::Xxh3;

use super::myers::{self, WorkBudget};
use super::print::{HloLine, module_lines};

/// How a row of the side-by-side view compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowKind {
    /// Equal, instruction numbering aside.
    Same,
    /// The same instruction (or header) with different constants, shapes or attributes.
    Changed,
    OnlyLeft,
    OnlyRight,
}

/// A row of the side-by-side view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SideRow {
    pub left: Option<String>,
    pub right: Option<String>,
    pub kind: RowKind,
    /// Byte ranges of `left` that differ from `right` (only for `Changed` rows).
    pub left_spans: Vec<(usize, usize)>,
    pub right_spans: Vec<(usize, usize)>,
}

/// Steps of diff work (diagonals visited and lines compared) one alignment may take before the
/// rest of each hunk is reported as replaced: a pathological pair of modules must not freeze the
/// GUI. A count rather than a clock, so that the same pair aligns the same way on every machine.
/// At about 4.2 ns a step (release build, one core of a 2-core cloud VM) this is the 60 ms the
/// diff was given when it was timed: two 10,000-line listings with nothing in common take about
/// 85 ms in all, as they did then, and 2,000-line ones still finish (in 6 million steps).
pub const DIFF_BUDGET_STEPS: u64 = 14_000_000;

/// Two listings aligned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SideBySide {
    pub rows: Vec<SideRow>,
    /// The diff ran out of its budget: some lines shown as only on one side may have a match on
    /// the other.
    pub budget_exhausted: bool,
    /// Steps of diff work taken (see [`DIFF_BUDGET_STEPS`]).
    pub steps: u64,
}

/// A listing with what the alignment compares.
struct Listing {
    lines: Vec<HloLine>,
    /// Hash of the line's text with instruction numbering removed: equal lines are `Same`.
    text_key: Vec<u64>,
    /// Hash of what makes two lines "the same line" (instruction name without numbering and
    /// opcode; the header's computation): unequal text with equal identity is `Changed`.
    ident_key: Vec<u64>,
    /// Per computation, its range of lines.
    comp_lines: Vec<Range<usize>>,
    /// Per computation, what must match for instruction-by-instruction alignment.
    comp_key: Vec<u64>,
}

fn listing(m: &HloModuleProto) -> Listing {
    let lines = module_lines(m);
    let mut text_key = Vec::with_capacity(lines.len());
    let mut ident_key = Vec::with_capacity(lines.len());
    let mut buf = String::new();
    for l in &lines {
        text_key.push(normalized_hash(&l.text, &mut buf));
        let id = match l.instruction {
            Some(ii) => m
                .computations
                .get(l.computation)
                .and_then(|c| c.instructions.get(ii))
                .map_or(0, |i| {
                    hash_of(&("inst", strip_numbering(&i.name), &i.opcode))
                }),
            None if l.text == "}" => hash_of(&"}"),
            None => m
                .computations
                .get(l.computation)
                .map_or(0, |c| hash_of(&("comp", strip_numbering(&c.name)))),
        };
        ident_key.push(id);
    }
    let entry_id = hlo::entry_computation(m).map(|c| c.id);
    let mut comp_lines = Vec::with_capacity(m.computations.len());
    let mut start = 0;
    for c in &m.computations {
        let end = start + c.instructions.len() + 2;
        comp_lines.push(start..end);
        start = end;
    }
    let comp_key = m
        .computations
        .iter()
        .map(|c| structure_hash(c, Some(c.id) == entry_id, m))
        .collect();
    Listing {
        lines,
        text_key,
        ident_key,
        comp_lines,
        comp_key,
    }
}

/// A computation's shape as a graph: its (unnumbered) name, and each instruction's opcode,
/// operands (as positions in the computation) and callees. Equal structures are aligned
/// instruction by instruction.
fn structure_hash(c: &HloComputationProto, entry: bool, m: &HloModuleProto) -> u64 {
    let pos: HashMap<i64, usize> = c
        .instructions
        .iter()
        .enumerate()
        .map(|(n, i)| (i.id, n))
        .collect();
    let comp_names: HashMap<i64, &str> = m
        .computations
        .iter()
        .map(|c| (c.id, c.name.as_str()))
        .collect();
    let mut h = Xxh3::new();
    (strip_numbering(&c.name), entry, c.instructions.len()).hash(&mut h);
    for i in &c.instructions {
        i.opcode.hash(&mut h);
        i.operand_ids.len().hash(&mut h);
        for o in &i.operand_ids {
            pos.get(o).hash(&mut h);
        }
        for cc in &i.called_computation_ids {
            comp_names.get(cc).map(|n| strip_numbering(n)).hash(&mut h);
        }
        (i.id == c.root_id).hash(&mut h);
    }
    h.finish()
}

fn hash_of<T: Hash + ?Sized>(v: &T) -> u64 {
    let mut h = Xxh3::new();
    v.hash(&mut h);
    h.finish()
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'%' | b'-' | b'$')
}

/// Splits a line into words (identifiers, numbers) and single other characters; the ranges cover
/// the line.
fn tokens(line: &str) -> Vec<Range<usize>> {
    Tokens::new(line).collect()
}

struct Tokens<'a> {
    line: &'a str,
    at: usize,
}

impl<'a> Tokens<'a> {
    fn new(line: &'a str) -> Self {
        Tokens { line, at: 0 }
    }
}

impl Iterator for Tokens<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        let bytes = self.line.as_bytes();
        let start = self.at;
        let first = *bytes.get(start)?;
        if is_word_byte(first) {
            let len = bytes[start..]
                .iter()
                .position(|b| !is_word_byte(*b))
                .unwrap_or(bytes.len() - start);
            self.at = start + len;
        } else {
            // One character (whole, for UTF-8).
            self.at = start + self.line[start..].chars().next().map_or(1, char::len_utf8);
        }
        Some(start..self.at)
    }
}

/// `%add.12` → `%add`, `main.3` → `main`, `fused_computation.1.2` → `fused_computation`:
/// instruction and computation numbering. Numbers (`0.1`) keep their digits.
fn strip_numbering(word: &str) -> &str {
    let first = word.trim_start_matches('%').bytes().next();
    if !first.is_some_and(|b| b.is_ascii_alphabetic() || b == b'_') {
        return word;
    }
    let mut w = word;
    while let Some((base, n)) = w.rsplit_once('.') {
        if !base.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
            w = base;
        } else {
            break;
        }
    }
    w
}

/// Hash of the line with numbering stripped from every word; `buf` is scratch space.
fn normalized_hash(line: &str, buf: &mut String) -> u64 {
    buf.clear();
    for t in Tokens::new(line) {
        buf.push_str(strip_numbering(&line[t]));
        // Separates tokens so that `ab` and `a`,`b` differ.
        buf.push('\u{1}');
    }
    xxhash_rust::xxh3::xxh3_64(buf.as_bytes())
}

/// The two listings aligned row by row. Computations are matched in order by name and
/// structure; matched ones pair their instructions by position, the others are aligned by a
/// line diff. Rows whose lines are the same instruction (or computation header) but differ in
/// text are `Changed`, with the differing tokens' byte ranges in the spans.
pub fn side_by_side(a: &HloModuleProto, b: &HloModuleProto) -> Vec<SideRow> {
    side_by_side_within(a, b, DIFF_BUDGET_STEPS).rows
}

/// [`side_by_side`] with a budget of `steps` of diff work, saying whether it ran out.
pub fn side_by_side_within(a: &HloModuleProto, b: &HloModuleProto, steps: u64) -> SideBySide {
    let la = listing(a);
    let lb = listing(b);
    let mut budget = WorkBudget::new(steps);
    let mut rows = Vec::with_capacity(la.lines.len().max(lb.lines.len()));
    let ops = myers::diff(&la.comp_key, &lb.comp_key, &mut budget);
    for op in ops {
        let (tag, ra, rb) = op.as_tag_tuple();
        match tag {
            DiffTag::Equal => {
                for (ca, cb) in ra.zip(rb) {
                    for (x, y) in la.comp_lines[ca].clone().zip(lb.comp_lines[cb].clone()) {
                        rows.push(pair_row(&la, x, &lb, y));
                    }
                }
            }
            DiffTag::Delete | DiffTag::Insert | DiffTag::Replace => {
                let lines_a = span_of(&la.comp_lines, ra);
                let lines_b = span_of(&lb.comp_lines, rb);
                align_lines(&la, lines_a, &lb, lines_b, &mut budget, &mut rows);
            }
        }
    }
    SideBySide {
        rows,
        budget_exhausted: budget.exhausted(),
        steps: budget.spent(),
    }
}

/// The lines of a run of computations.
fn span_of(comp_lines: &[Range<usize>], comps: Range<usize>) -> Range<usize> {
    match (comp_lines.get(comps.start), comps.end.checked_sub(1)) {
        (Some(first), Some(last)) if comps.start < comps.end => {
            first.start..comp_lines.get(last).map_or(first.end, |r| r.end)
        }
        _ => 0..0,
    }
}

/// Myers diff (within the budget) of `a[ra]` and `b[rb]`, its ranges given in indexes of `a` and `b`.
fn diff_ranges(
    a: &[u64],
    ra: Range<usize>,
    b: &[u64],
    rb: Range<usize>,
    budget: &mut WorkBudget,
) -> Vec<(DiffTag, Range<usize>, Range<usize>)> {
    myers::diff(&a[ra.clone()], &b[rb.clone()], budget)
        .iter()
        .map(|op| {
            let (tag, oa, ob) = op.as_tag_tuple();
            (
                tag,
                oa.start + ra.start..oa.end + ra.start,
                ob.start + rb.start..ob.end + rb.start,
            )
        })
        .collect()
}

/// Aligns two runs of lines by a diff of their normalized text; within a replaced block, lines
/// of the same identity are paired as `Changed`.
fn align_lines(
    la: &Listing,
    ra: Range<usize>,
    lb: &Listing,
    rb: Range<usize>,
    budget: &mut WorkBudget,
    rows: &mut Vec<SideRow>,
) {
    for (tag, oa, ob) in diff_ranges(&la.text_key, ra, &lb.text_key, rb, budget) {
        match tag {
            DiffTag::Equal => {
                for (x, y) in oa.zip(ob) {
                    rows.push(same_row(&la.lines[x].text, &lb.lines[y].text));
                }
            }
            DiffTag::Delete => rows.extend(oa.map(|x| only_left(&la.lines[x].text))),
            DiffTag::Insert => rows.extend(ob.map(|y| only_right(&lb.lines[y].text))),
            DiffTag::Replace => pair_replaced(la, oa, lb, ob, budget, rows),
        }
    }
}

/// In a block of lines replaced by others, pairs those with the same identity (in order) as
/// `Changed`; the rest are one-sided.
fn pair_replaced(
    la: &Listing,
    ra: Range<usize>,
    lb: &Listing,
    rb: Range<usize>,
    budget: &mut WorkBudget,
    rows: &mut Vec<SideRow>,
) {
    for (tag, oa, ob) in diff_ranges(&la.ident_key, ra, &lb.ident_key, rb, budget) {
        match tag {
            DiffTag::Equal => {
                for (x, y) in oa.zip(ob) {
                    rows.push(pair_row(la, x, lb, y));
                }
            }
            DiffTag::Delete => rows.extend(oa.map(|x| only_left(&la.lines[x].text))),
            DiffTag::Insert => rows.extend(ob.map(|y| only_right(&lb.lines[y].text))),
            DiffTag::Replace => {
                rows.extend(oa.map(|x| only_left(&la.lines[x].text)));
                rows.extend(ob.map(|y| only_right(&lb.lines[y].text)));
            }
        }
    }
}

/// Two lines known to correspond: `Same` when their normalized text is equal, else `Changed`.
fn pair_row(la: &Listing, x: usize, lb: &Listing, y: usize) -> SideRow {
    let (ta, tb) = (&la.lines[x].text, &lb.lines[y].text);
    if la.text_key[x] == lb.text_key[y] {
        return same_row(ta, tb);
    }
    let (left_spans, right_spans) = changed_spans(ta, tb);
    SideRow {
        left: Some(ta.clone()),
        right: Some(tb.clone()),
        kind: RowKind::Changed,
        left_spans,
        right_spans,
    }
}

fn same_row(a: &str, b: &str) -> SideRow {
    SideRow {
        left: Some(a.to_string()),
        right: Some(b.to_string()),
        kind: RowKind::Same,
        left_spans: Vec::new(),
        right_spans: Vec::new(),
    }
}

fn only_left(a: &str) -> SideRow {
    SideRow {
        left: Some(a.to_string()),
        right: None,
        kind: RowKind::OnlyLeft,
        left_spans: Vec::new(),
        right_spans: Vec::new(),
    }
}

fn only_right(b: &str) -> SideRow {
    SideRow {
        left: None,
        right: Some(b.to_string()),
        kind: RowKind::OnlyRight,
        left_spans: Vec::new(),
        right_spans: Vec::new(),
    }
}

/// Byte ranges `(start, end)` within a line.
type Spans = Vec<(usize, usize)>;

/// Byte ranges of the tokens that differ between two lines (numbering ignored), adjacent ones
/// merged.
fn changed_spans(a: &str, b: &str) -> (Spans, Spans) {
    let ta = tokens(a);
    let tb = tokens(b);
    let wa: Vec<&str> = ta.iter().map(|r| strip_numbering(&a[r.clone()])).collect();
    let wb: Vec<&str> = tb.iter().map(|r| strip_numbering(&b[r.clone()])).collect();
    let mut left = Vec::new();
    let mut right = Vec::new();
    for op in capture_diff_slices(Algorithm::Myers, &wa, &wb) {
        let (tag, oa, ob) = op.as_tag_tuple();
        if tag == DiffTag::Equal {
            continue;
        }
        push_span(&mut left, &ta[oa]);
        push_span(&mut right, &tb[ob]);
    }
    (left, right)
}

fn push_span(spans: &mut Vec<(usize, usize)>, toks: &[Range<usize>]) {
    let (Some(first), Some(last)) = (toks.first(), toks.last()) else {
        return;
    };
    match spans.last_mut() {
        Some(prev) if prev.1 == first.start => prev.1 = last.end,
        _ => spans.push((first.start, last.end)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_is_stripped_from_names_only() {
        assert_eq!(strip_numbering("%add.12"), "%add");
        assert_eq!(
            strip_numbering("fused_computation.1.2"),
            "fused_computation"
        );
        assert_eq!(strip_numbering("0.1"), "0.1");
        assert_eq!(strip_numbering("-0.5"), "-0.5");
        assert_eq!(strip_numbering("jax_lr.py"), "jax_lr.py");
        assert_eq!(strip_numbering("%p0"), "%p0");
    }

    #[test]
    fn tokens_cover_the_line() {
        let line = "  %c.3 = f32[] constant(0.05), metadata={op_name=\"jit(f)/mul\"}";
        let toks = tokens(line);
        let joined: String = toks.iter().map(|r| &line[r.clone()]).collect();
        assert_eq!(joined, line);
        assert!(toks.iter().any(|r| &line[r.clone()] == "0.05"));
        assert!(toks.iter().any(|r| &line[r.clone()] == "%c.3"));
    }

    #[test]
    fn spans_mark_only_the_differing_tokens() {
        let a = "  %m.2 = f32[8]{0} multiply(%a.1, %b.4), dimensions={0}";
        let b = "  %m.7 = f32[16]{0} multiply(%a.5, %b.6), dimensions={0}";
        let (l, r) = changed_spans(a, b);
        assert_eq!(l.iter().map(|s| &a[s.0..s.1]).collect::<Vec<_>>(), ["8"]);
        assert_eq!(r.iter().map(|s| &b[s.0..s.1]).collect::<Vec<_>>(), ["16"]);
    }
}
