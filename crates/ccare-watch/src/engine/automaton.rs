//! The phrase automaton of the `marker` and `phrase` detectors (SW-4): an Aho-Corasick
//! automaton over the phrases' UTF-8 bytes whose state is carried between deltas, so a
//! delta costs O(|delta|) with no carry copied or rescanned (SW-3).
//!
//! Its state is the longest suffix of the text read that is a prefix of a phrase: the
//! part of the spec's carry ("longest − 1 characters") that can still complete a
//! phrase, so it finds exactly the occurrences a carry-and-rescan finds. Each state
//! knows the first listed phrase ending there (its own or one reached through its
//! failure links), which gives the detectors' tie rule: of the phrases ending
//! earliest, the first listed. UTF-8 is self-synchronizing, so a byte-level match of a
//! phrase always starts and ends on character boundaries.
//!
//! Small lists (every default list) get a dense transition table over byte classes,
//! one load per byte; a list too large for that is walked through its failure links,
//! still O(1) amortized per byte, with memory linear in the phrases' length.

use std::collections::VecDeque;

/// No phrase ends in this state.
const NONE: u32 = u32::MAX;
/// The root: nothing of a phrase read.
const ROOT: u32 = 0;
/// The most entries (states × byte classes) a dense table may have: 1 MiB of `u32`s.
const DENSE_LIMIT: usize = 1 << 18;
/// Set in a dense entry whose target state ends a phrase.
const HIT_FLAG: u32 = 1 << 31;

/// One trie node with its failure link.
#[derive(Debug, Clone, PartialEq)]
struct Node {
    /// Children by byte, sorted by byte.
    children: Vec<(u8, u32)>,
    /// The longest proper suffix of this node's prefix that is also a trie node.
    fail: u32,
    /// The first listed phrase ending here, or `NONE`.
    hit: u32,
    /// The prefix's length in characters (for the carry this state stands for).
    chars: u32,
}

impl Node {
    fn new(chars: u32) -> Self {
        Self {
            children: Vec::new(),
            fail: ROOT,
            hit: NONE,
            chars,
        }
    }

    fn child(&self, byte: u8) -> Option<u32> {
        self.children
            .binary_search_by_key(&byte, |(key, _)| *key)
            .ok()
            .and_then(|index| self.children.get(index))
            .map(|(_, child)| *child)
    }
}

/// A dense transition table: `next[state × stride + class[byte]]` is the next state
/// times `stride`, with `HIT_FLAG` set when a phrase ends there.
#[derive(Debug, Clone, PartialEq)]
struct Dense {
    class: [u8; 256],
    stride: u32,
    next: Box<[u32]>,
}

/// The automaton of one phrase list; its state is a plain `u32` kept by the scan.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PhraseAutomaton {
    nodes: Box<[Node]>,
    /// Boxed: the byte-class map is 256 bytes, kept out of the trigger's detector.
    dense: Option<Box<Dense>>,
    /// Some phrase holds an ASCII byte; if none does, every ASCII byte leads back to
    /// the root (no state has a child on it), so an ASCII text needs no walk.
    reads_ascii: bool,
}

/// A scan's position in its automaton: where the text read so far leaves it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ScanState(u32);

impl PhraseAutomaton {
    /// Builds the automaton of `phrases`; empty phrases are skipped (the config rejects
    /// them), a phrase listed twice reports its first position.
    pub(crate) fn new<'a>(phrases: impl IntoIterator<Item = &'a str>) -> Self {
        let mut nodes = vec![Node::new(0)];
        for (index, phrase) in phrases.into_iter().enumerate() {
            let Ok(index) = u32::try_from(index) else {
                break;
            };
            if phrase.is_empty() {
                continue;
            }
            let mut at = ROOT;
            for &byte in phrase.as_bytes() {
                at = child_or_insert(&mut nodes, at, byte);
            }
            if let Some(node) = nodes.get_mut(at as usize)
                && node.hit == NONE
            {
                node.hit = index;
            }
        }
        let order = link_failures(&mut nodes);
        let dense = Dense::build(&nodes, &order).map(Box::new);
        let reads_ascii = nodes
            .iter()
            .any(|node| node.children.iter().any(|(byte, _)| byte.is_ascii()));
        Self {
            nodes: nodes.into(),
            dense,
            reads_ascii,
        }
    }

    /// Whether some phrase holds an ASCII byte (else an ASCII text only moves the
    /// state to the root, and never ends a phrase).
    #[inline]
    pub(crate) fn reads_ascii(&self) -> bool {
        self.reads_ascii
    }

    /// The state before any text, as at the start of an attempt.
    pub(crate) fn start(&self) -> ScanState {
        ScanState(ROOT)
    }

    /// Reads `text` from `state` and returns the first phrase end in it as `(end byte
    /// in text, phrase index)`; `state` moves past all of `text`.
    #[inline]
    pub(crate) fn feed(&self, state: &mut ScanState, text: &str) -> Option<(usize, usize)> {
        self.feed_after(state, text, 0)
    }

    /// Like [`PhraseAutomaton::feed`], reporting only ends after byte `from` of `text`
    /// (earlier ones were judged by an earlier scan).
    #[inline]
    pub(crate) fn feed_after(
        &self,
        state: &mut ScanState,
        text: &str,
        from: usize,
    ) -> Option<(usize, usize)> {
        match &self.dense {
            Some(dense) => dense.feed(&self.nodes, state, text.as_bytes(), from),
            None => self.feed_sparse(state, text.as_bytes(), from),
        }
    }

    /// How many characters of a phrase the state holds (the carry it stands for).
    #[cfg(test)]
    pub(crate) fn carried_chars(&self, state: ScanState) -> usize {
        self.node_of(state).map_or(0, |node| node.chars as usize)
    }

    #[cfg(test)]
    fn node_of(&self, state: ScanState) -> Option<&Node> {
        let index = match &self.dense {
            Some(dense) => state.0 / dense.stride,
            None => state.0,
        };
        self.nodes.get(index as usize)
    }

    fn feed_sparse(
        &self,
        state: &mut ScanState,
        bytes: &[u8],
        from: usize,
    ) -> Option<(usize, usize)> {
        let mut first = None;
        let mut at = state.0;
        for (offset, &byte) in bytes.iter().enumerate() {
            at = step_sparse(&self.nodes, at, byte);
            if first.is_none() && offset >= from {
                let hit = self.nodes.get(at as usize).map_or(NONE, |node| node.hit);
                if hit != NONE {
                    first = Some((offset + 1, hit as usize));
                }
            }
        }
        state.0 = at;
        first
    }
}

impl Dense {
    /// The dense table of `nodes` (visited in breadth-first `order`), or `None` if it
    /// would exceed `DENSE_LIMIT` entries.
    fn build(nodes: &[Node], order: &[u32]) -> Option<Self> {
        let mut class = [0u8; 256];
        let mut representative = vec![None];
        for node in nodes {
            for (byte, _) in &node.children {
                let slot = class.get_mut(usize::from(*byte))?;
                if *slot == 0 {
                    // UTF-8 never uses 13 of the 256 byte values, so at most 243 bytes
                    // get a class besides 0; a failure here only means no dense table.
                    *slot = u8::try_from(representative.len()).ok()?;
                    representative.push(Some(*byte));
                }
            }
        }
        let stride = representative.len();
        let entries = nodes.len().checked_mul(stride)?;
        if entries > DENSE_LIMIT {
            return None;
        }
        let stride32 = u32::try_from(stride).ok()?;
        let mut next = vec![0u32; entries];
        // Breadth-first, so a state's failure target is filled before it.
        for &state in order {
            let node = nodes.get(state as usize)?;
            for (class_id, byte) in representative.iter().enumerate() {
                let target = match byte {
                    None => ROOT,
                    Some(byte) => match node.child(*byte) {
                        Some(child) => child,
                        None if state == ROOT => ROOT,
                        None => {
                            let via = (node.fail as usize) * stride + class_id;
                            (next.get(via).copied()? & !HIT_FLAG) / stride32
                        }
                    },
                };
                let hit = nodes
                    .get(target as usize)
                    .is_some_and(|node| node.hit != NONE);
                let entry = next.get_mut(state as usize * stride + class_id)?;
                *entry = (target * stride32) | if hit { HIT_FLAG } else { 0 };
            }
        }
        Some(Self {
            class,
            stride: stride32,
            next: next.into(),
        })
    }

    #[inline]
    fn feed(
        &self,
        nodes: &[Node],
        state: &mut ScanState,
        bytes: &[u8],
        from: usize,
    ) -> Option<(usize, usize)> {
        let mut at = state.0;
        let mut offset = 0;
        let mut first = None;
        while let Some(&byte) = bytes.get(offset) {
            let class = u32::from(self.class[usize::from(byte)]);
            let entry = self.next.get((at + class) as usize).copied().unwrap_or(0);
            at = entry & !HIT_FLAG;
            offset += 1;
            if entry & HIT_FLAG != 0 && offset > from {
                let hit = nodes
                    .get((at / self.stride) as usize)
                    .map_or(NONE, |node| node.hit);
                first = Some((offset, hit as usize));
                break;
            }
        }
        // The rest of the text only moves the state.
        while let Some(&byte) = bytes.get(offset) {
            let class = u32::from(self.class[usize::from(byte)]);
            at = self.next.get((at + class) as usize).copied().unwrap_or(0) & !HIT_FLAG;
            offset += 1;
        }
        state.0 = at;
        first
    }
}

/// The child of `at` on `byte`, inserted if missing.
fn child_or_insert(nodes: &mut Vec<Node>, at: u32, byte: u8) -> u32 {
    if let Some(child) = nodes.get(at as usize).and_then(|node| node.child(byte)) {
        return child;
    }
    let chars = nodes.get(at as usize).map_or(0, |node| node.chars)
        + u32::from(!matches!(byte, 0x80..=0xBF));
    let Ok(child) = u32::try_from(nodes.len()) else {
        return at;
    };
    nodes.push(Node::new(chars));
    if let Some(node) = nodes.get_mut(at as usize) {
        let position = node.children.partition_point(|(key, _)| *key < byte);
        node.children.insert(position, (byte, child));
    }
    child
}

/// Sets every node's failure link and folds the hits reached through it into the
/// node's own (keeping the first listed); returns the nodes in breadth-first order.
fn link_failures(nodes: &mut [Node]) -> Vec<u32> {
    let mut order = Vec::with_capacity(nodes.len());
    let mut queue = VecDeque::from([ROOT]);
    while let Some(state) = queue.pop_front() {
        order.push(state);
        let (children, fail) = match nodes.get(state as usize) {
            Some(node) => (node.children.clone(), node.fail),
            None => continue,
        };
        for (byte, child) in children {
            let link = if state == ROOT {
                ROOT
            } else {
                let mut candidate = fail;
                loop {
                    if let Some(next) = nodes.get(candidate as usize).and_then(|n| n.child(byte)) {
                        break next;
                    }
                    if candidate == ROOT {
                        break ROOT;
                    }
                    candidate = nodes.get(candidate as usize).map_or(ROOT, |n| n.fail);
                }
            };
            let inherited = nodes.get(link as usize).map_or(NONE, |node| node.hit);
            if let Some(node) = nodes.get_mut(child as usize) {
                node.fail = link;
                node.hit = node.hit.min(inherited);
            }
            queue.push_back(child);
        }
    }
    order
}

/// One step without a dense table: follow failure links until `byte` has a child.
fn step_sparse(nodes: &[Node], mut at: u32, byte: u8) -> u32 {
    loop {
        let Some(node) = nodes.get(at as usize) else {
            return ROOT;
        };
        if let Some(child) = node.child(byte) {
            return child;
        }
        if at == ROOT {
            return ROOT;
        }
        at = node.fail;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// The reference: every occurrence in `text` by brute force, the earliest end
    /// after `from` with the first listed phrase.
    fn brute(phrases: &[&str], text: &str, from: usize) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for start in 0..text.len() {
            for (index, phrase) in phrases.iter().enumerate() {
                if !phrase.is_empty() && text.as_bytes()[start..].starts_with(phrase.as_bytes()) {
                    let end = start + phrase.len();
                    if end > from && best.is_none_or(|best| (end, index) < best) {
                        best = Some((end, index));
                    }
                }
            }
        }
        best
    }

    #[test]
    fn sw_4_dense_and_sparse_automata_agree_with_brute_force() {
        let lists: [&[&str]; 5] = [
            &["AB", "C", "XC"],
            &["aa"],
            &["he", "she", "his", "hers"],
            &["时间不够", "时间有限", "来不及", "间不"],
            &["c😀", "ab", "😀ab", "ab"],
        ];
        let texts = [
            "CAB",
            "XC",
            "aaaa",
            "ushers",
            "嗯，时间不够来不及",
            "xc😀ab😀abab",
            "",
        ];
        for phrases in lists {
            let dense = PhraseAutomaton::new(phrases.iter().copied());
            let mut sparse = dense.clone();
            sparse.dense = None;
            assert!(dense.dense.is_some());
            for text in texts {
                for from in 0..=text.len() {
                    for automaton in [&dense, &sparse] {
                        let mut state = automaton.start();
                        assert_eq!(
                            automaton.feed_after(&mut state, text, from),
                            brute(phrases, text, from),
                            "{phrases:?} in {text:?} after {from}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn sw_4_state_carries_an_occurrence_over_deltas() {
        let automaton = PhraseAutomaton::new(["XYZZY"]);
        let mut state = automaton.start();
        assert_eq!(automaton.feed(&mut state, "AB"), None);
        assert_eq!(automaton.feed(&mut state, "XY"), None);
        assert_eq!(automaton.carried_chars(state), 2);
        assert_eq!(automaton.feed(&mut state, "Z"), None);
        assert_eq!(automaton.feed(&mut state, "ZYab"), Some((2, 0)));
        assert_eq!(automaton.carried_chars(state), 0);
    }

    #[test]
    fn sw_4_a_list_too_large_for_a_dense_table_is_walked_sparsely() {
        let phrases: Vec<String> = (0..3_000)
            .map(|n| format!("phrase number {n} ends"))
            .collect();
        let automaton = PhraseAutomaton::new(phrases.iter().map(String::as_str));
        assert!(automaton.dense.is_none());
        let mut state = automaton.start();
        assert_eq!(automaton.feed(&mut state, "... phrase number 2"), None);
        assert_eq!(automaton.feed(&mut state, "999 ends"), Some((8, 2_999)));
    }
}
