//! Property test: random operation sequences against a simple model (a map
//! from (parent, name) to node and a tree of nodes), compared after every
//! step.
//!
//! The test keeps a handle on every entry it ever created, so nothing
//! positive is evictable: `prune` may then only free negative entries, which
//! the model forgets afterwards, and `len()` must equal the number of entries
//! ever created minus the freed negatives (in-use entries are never freed).

use std::collections::HashMap;

use dcache::{Config, Dcache, Dentry, Lookup, Walk};
use proptest::prelude::*;

const NAMES: [&[u8]; 4] = [b"a", b"b", b"c", b"longer-name-xyz"];

#[derive(Clone, Debug)]
enum Op {
    Insert(usize, usize, Option<u32>),
    Replace(usize, usize, Option<u32>),
    Remove(usize, usize),
    Rename(usize, usize, usize, usize),
    Lookup(usize, usize),
    Walk(usize, Vec<usize>),
    Drop(usize, u32),
    Prune(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let n = 0..NAMES.len();
    let node = 0..64usize;
    let payload = prop_oneof![Just(None), (0..100u32).prop_map(Some)];
    prop_oneof![
        4 => (node.clone(), n.clone(), payload.clone()).prop_map(|(p, n, v)| Op::Insert(p, n, v)),
        1 => (node.clone(), n.clone(), payload).prop_map(|(p, n, v)| Op::Replace(p, n, v)),
        1 => (node.clone(), n.clone()).prop_map(|(p, n)| Op::Remove(p, n)),
        2 => (node.clone(), n.clone(), node.clone(), n.clone()).prop_map(|(a, b, c, d)| Op::Rename(a, b, c, d)),
        3 => (node.clone(), n.clone()).prop_map(|(p, n)| Op::Lookup(p, n)),
        2 => (node.clone(), proptest::collection::vec(n, 0..4)).prop_map(|(p, v)| Op::Walk(p, v)),
        1 => (node, 0..120u32).prop_map(|(p, t)| Op::Drop(p, t)),
        1 => (0..8usize).prop_map(Op::Prune),
    ]
}

struct MNode {
    handle: Dentry<u32>,
    parent: Option<usize>,
    payload: Option<u32>,
    hashed: bool,
}

struct Model {
    nodes: Vec<MNode>,
    keys: HashMap<(usize, &'static [u8]), usize>,
}

impl Model {
    fn children(&self, p: usize) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .keys
            .iter()
            .filter(|((q, _), _)| *q == p)
            .map(|(_, &i)| i)
            .collect();
        v.sort_unstable();
        v
    }

    fn unhash_tree(&mut self, i: usize) -> u64 {
        let mut n = 0;
        if self.nodes[i].hashed {
            self.nodes[i].hashed = false;
            n += 1;
        }
        self.keys.retain(|_, v| *v != i);
        for c in self.children(i) {
            n += self.unhash_tree(c);
        }
        n
    }

    fn is_ancestor_or_self(&self, a: usize, mut d: usize) -> bool {
        loop {
            if a == d {
                return true;
            }
            match self.nodes[d].parent {
                Some(p) => d = p,
                None => return false,
            }
        }
    }

    fn add(&mut self, handle: Dentry<u32>, parent: usize, name: &'static [u8], payload: Option<u32>) -> usize {
        let hashed = self.nodes[parent].hashed;
        self.nodes.push(MNode {
            handle,
            parent: Some(parent),
            payload,
            hashed,
        });
        let i = self.nodes.len() - 1;
        if hashed {
            self.keys.insert((parent, name), i);
        }
        i
    }

    fn drop_below(&mut self, d: usize, threshold: u32, dropped: &mut u64, skipped: &mut u64) {
        for c in self.children(d) {
            match self.nodes[c].payload {
                Some(v) if v >= threshold => {
                    *skipped += 1;
                    self.drop_below(c, threshold, dropped, skipped);
                }
                _ => *dropped += self.unhash_tree(c),
            }
        }
    }
}

fn run(ops: Vec<Op>) {
    let c = Dcache::new(
        Config {
            max_entries: 1 << 12,
            max_negative: 1 << 12,
            prune_batch: 3,
        },
        0u32,
    );
    let mut m = Model {
        nodes: vec![MNode {
            handle: c.root(),
            parent: None,
            payload: Some(0),
            hashed: true,
        }],
        keys: HashMap::new(),
    };
    for op in ops {
        let pick = |i: usize| i % m.nodes.len();
        match op {
            Op::Insert(p, n, v) | Op::Replace(p, n, v) => {
                let (p, name) = (pick(p), NAMES[n]);
                let replace = matches!(op, Op::Replace(..));
                let d = if replace {
                    c.replace(&m.nodes[p].handle, name, v)
                } else {
                    c.insert(&m.nodes[p].handle, name, v)
                };
                let existing = m.keys.get(&(p, name)).copied();
                match existing {
                    Some(e) if !replace && (m.nodes[e].payload.is_some() || v.is_none()) => {
                        assert!(
                            Dentry::ptr_eq(&d, &m.nodes[e].handle),
                            "insert must return the cached entry"
                        );
                    }
                    _ => {
                        if let Some(e) = existing {
                            m.unhash_tree(e);
                        }
                        assert_eq!(d.payload().copied(), v);
                        m.add(d, p, name, v);
                    }
                }
            }
            Op::Remove(p, n) => {
                let (p, name) = (pick(p), NAMES[n]);
                let got = c.remove(&m.nodes[p].handle, name);
                let existing = m.keys.get(&(p, name)).copied();
                assert_eq!(got, existing.is_some());
                if let Some(e) = existing {
                    m.unhash_tree(e);
                }
            }
            Op::Rename(op_, on, np, nn) => {
                let (op_, on, np, nn) = (pick(op_), NAMES[on], pick(np), NAMES[nn]);
                let got = c.rename(&m.nodes[op_].handle, on, &m.nodes[np].handle, nn);
                // A rename that moves nothing still drops whatever is cached
                // at the new name: it is stale once the filesystem renamed.
                let drop_target = |m: &mut Model| {
                    if let Some(t) = m.keys.get(&(np, nn)).copied() {
                        m.unhash_tree(t);
                    }
                };
                let expected = match m.keys.get(&(op_, on)).copied() {
                    None => {
                        drop_target(&mut m);
                        false
                    }
                    Some(x) if m.nodes[x].payload.is_none() => {
                        m.unhash_tree(x);
                        drop_target(&mut m);
                        false
                    }
                    Some(_) if op_ == np && on == nn => true,
                    Some(x) if m.is_ancestor_or_self(x, np) => false,
                    Some(x) if !m.nodes[np].hashed => {
                        m.unhash_tree(x);
                        true
                    }
                    Some(x) => {
                        // Move first: the target may be an ancestor of the
                        // moved entry, whose subtree then no longer holds it.
                        let target = m.keys.get(&(np, nn)).copied();
                        m.keys.remove(&(op_, on));
                        m.keys.insert((np, nn), x);
                        m.nodes[x].parent = Some(np);
                        if let Some(t) = target {
                            m.unhash_tree(t);
                        }
                        true
                    }
                };
                assert_eq!(got, expected, "rename result");
            }
            Op::Lookup(p, n) => {
                let (p, name) = (pick(p), NAMES[n]);
                let expected = m.keys.get(&(p, name)).map(|&i| m.nodes[i].payload);
                let got = match c.lookup(&m.nodes[p].handle, name) {
                    Lookup::Positive(d) => {
                        let i = m.keys[&(p, name)];
                        assert!(Dentry::ptr_eq(&d, &m.nodes[i].handle));
                        Some(d.payload().copied())
                    }
                    Lookup::Negative => Some(None),
                    Lookup::Miss => None,
                };
                assert_eq!(got, expected, "lookup");
            }
            Op::Walk(p, path) => {
                let p = pick(p);
                let comps: Vec<&[u8]> = path.iter().map(|&n| NAMES[n]).collect();
                let mut cur = p;
                let mut expected = None;
                for (k, comp) in comps.iter().enumerate() {
                    match m.keys.get(&(cur, *comp)).copied() {
                        Some(i) if m.nodes[i].payload.is_none() => {
                            expected = Some((cur, k, true));
                            break;
                        }
                        Some(i) => cur = i,
                        None => {
                            expected = Some((cur, k, false));
                            break;
                        }
                    }
                }
                match (c.walk(&m.nodes[p].handle, comps.iter().copied()), expected) {
                    (Walk::Found(d), None) => assert!(Dentry::ptr_eq(&d, &m.nodes[cur].handle)),
                    (Walk::Negative { parent, consumed }, Some((at, k, true)))
                    | (
                        Walk::Miss {
                            deepest: parent,
                            consumed,
                        },
                        Some((at, k, false)),
                    ) => {
                        assert!(Dentry::ptr_eq(&parent, &m.nodes[at].handle));
                        assert_eq!(consumed, k);
                    }
                    (got, want) => panic!("walk: got {got:?}, want {want:?}"),
                }
            }
            Op::Drop(d, threshold) => {
                let d = pick(d);
                let s = c.drop_subtree(&m.nodes[d].handle, |&v| v < threshold);
                let (mut dropped, mut skipped) = (0, 0);
                m.drop_below(d, threshold, &mut dropped, &mut skipped);
                // Every entry is held by the test, so all are busy.
                assert_eq!((s.dropped, s.busy, s.skipped), (0, dropped, skipped));
            }
            Op::Prune(n) => {
                // The test holds every entry, so nothing may be freed.
                assert_eq!(c.prune(n), 0);
            }
        }
        for (i, n) in m.nodes.iter().enumerate() {
            assert_eq!(n.handle.is_hashed(), n.hashed, "hashed state of node {i}");
            assert_eq!(n.handle.payload().copied(), n.payload);
            if let Some(p) = n.parent {
                assert!(Dentry::ptr_eq(&n.handle.parent().expect("parent"), &m.nodes[p].handle));
            }
        }
        assert_eq!(c.len(), m.nodes.len() - 1, "every held entry stays allocated");
    }
    // Release everything: all entries go, the cache ends empty.
    let root = c.root();
    m.nodes.clear();
    c.drop_subtree(&root, |_| true);
    assert_eq!(c.len(), 0);
}

proptest! {
    // PROPTEST_CASES overrides the default number of cases.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok())
            .unwrap_or(if cfg!(debug_assertions) { 128 } else { 512 })
    ))]
    #[test]
    fn matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops);
    }
}
