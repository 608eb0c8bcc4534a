//! Checkmate's and Moccasin's graphs (networkx node-link JSON) as scheduling DAGs.
//!
//! Two kinds of file (see ../shared/bench/checkmate/README.md):
//! - training graphs: nodes `{"id", "cost_ram", ...}`, links `{"source", "target"}`;
//! - `random_layered_n*.json`: nodes `{"name", "out_cost", ...}` (the name is the id), links
//!   `{"0": source, "1": target}`, and the graph's reference order in `graph.order`.
//!
//! Every node writes one value of its cost in bytes, read by the targets of its links.
//! Nothing survives to the end and nothing exists before the first node, so the DAG's peak
//! is exactly the files' evaluation rule: an execution's output is live from its own step
//! to its last reader, inclusive.
//!
//! [`parse`] reads a file as a scheduling DAG (sizes only); [`parse_remat`] as a
//! rematerialisation problem (sizes, compute costs, forward or backward) in the files'
//! plain order: ids ascending for the training graphs (forward, `Loss`, backward in
//! reverse; the README's budgets are fractions of its peak), `graph.order` for the random
//! layered graphs (whose ids ascending are not a topological order).

use std::collections::BTreeMap;

use serde_json::Value as Json;
use thiserror::Error;

use crate::solve::order::{Dag, DagError};
use crate::solve::remat::{NodeInfo, Problem};
use crate::solve::{DagValue, Node};

/// A graph read from a file.
#[derive(Clone, Debug)]
pub struct BenchGraph {
    /// `graph.name`, if the file has one.
    pub name: Option<String>,
    /// The file's id of each node, by index (ascending).
    pub ids: Vec<u64>,
    pub links: usize,
    pub dag: Dag,
    /// `graph.order` as node indices, when the file has one.
    pub reference: Option<Vec<Node>>,
}

/// Why a file cannot be read as a graph.
#[derive(Clone, PartialEq, Eq, Debug, Error)]
pub enum ReadError {
    /// The text is not JSON; `line` and `column` (from 1) locate the problem.
    #[error("not valid JSON: {message}")]
    Json { message: String, line: usize, column: usize },
    /// The JSON has a field of the wrong kind where the reader takes it apart (`nodes` not
    /// an array, a node not an object); `line` and `column` (from 1) locate it.
    #[error("not a node-link graph: {message}")]
    Type { message: String, line: usize, column: usize },
    /// The JSON is not a node-link graph of either kind (names the offending field).
    #[error("{0}")]
    Shape(String),
    /// The links do not make a DAG.
    #[error("{0}")]
    Graph(#[from] DagError),
}

impl ReadError {
    /// Line and column (from 1) of a JSON syntax error.
    pub fn location(&self) -> Option<(usize, usize)> {
        match self {
            ReadError::Json { line, column, .. } | ReadError::Type { line, column, .. } => Some((*line, *column)),
            _ => None,
        }
    }
}

/// The file as read: the fields either kind of file uses, each kept as the JSON value it
/// is (checked below, so that errors name a field as the file spells it); every other
/// field is skipped. Typed, not a tree of `Json` maps: a 20,000-node graph read as a tree
/// took 60 MB and most of a 0.1 s time limit.
#[derive(serde::Deserialize)]
struct File {
    nodes: Option<Vec<FileNode>>,
    links: Option<Vec<FileLink>>,
    #[serde(default, deserialize_with = "present")]
    graph: Option<Json>,
}

/// A node: `id` (training graphs) or `name` (random layered graphs, where it is the id).
#[derive(serde::Deserialize)]
struct FileNode {
    #[serde(default, deserialize_with = "present")]
    id: Option<Json>,
    #[serde(default, deserialize_with = "present")]
    name: Option<Json>,
    #[serde(default, deserialize_with = "present")]
    out_cost: Option<Json>,
    #[serde(default, deserialize_with = "present")]
    cost_ram: Option<Json>,
    #[serde(default, deserialize_with = "present")]
    cost_cpu: Option<Json>,
    #[serde(default, deserialize_with = "present")]
    duration: Option<Json>,
    #[serde(default, deserialize_with = "present")]
    backward: Option<Json>,
}

impl FileNode {
    fn field(&self, key: &str) -> Option<&Json> {
        match key {
            "id" => self.id.as_ref(),
            "name" => self.name.as_ref(),
            "out_cost" => self.out_cost.as_ref(),
            "cost_ram" => self.cost_ram.as_ref(),
            "cost_cpu" => self.cost_cpu.as_ref(),
            "duration" => self.duration.as_ref(),
            _ => None,
        }
    }
}

/// A link: `source`/`target` (training graphs) or `0`/`1` (random layered graphs).
#[derive(serde::Deserialize)]
struct FileLink {
    #[serde(default, deserialize_with = "present")]
    source: Option<Json>,
    #[serde(default, deserialize_with = "present")]
    target: Option<Json>,
    #[serde(rename = "0", default, deserialize_with = "present")]
    zero: Option<Json>,
    #[serde(rename = "1", default, deserialize_with = "present")]
    one: Option<Json>,
}

impl FileLink {
    fn field(&self, key: &str) -> Option<&Json> {
        match key {
            "source" => self.source.as_ref(),
            "target" => self.target.as_ref(),
            "0" => self.zero.as_ref(),
            "1" => self.one.as_ref(),
            _ => None,
        }
    }
}

/// A field that is there, `null` included (`Option`'s own reading takes `null` for absent).
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Json>, D::Error> {
    <Json as serde::Deserialize>::deserialize(deserializer).map(Some)
}

fn read(text: &str) -> Result<File, ReadError> {
    serde_json::from_str(text).map_err(|e| {
        let (line, column) = (e.line(), e.column());
        // serde_json's message ends with the location, which `location` gives apart.
        let message = e.to_string();
        let message = message.rsplit_once(" at line ").map_or(message.as_str(), |(m, _)| m).to_string();
        if e.is_data() { ReadError::Type { message, line, column } } else { ReadError::Json { message, line, column } }
    })
}

fn shape(message: impl Into<String>) -> ReadError {
    ReadError::Shape(message.into())
}

/// A non-negative integer field, trying `keys` in turn (`field` gives each one's value),
/// and the key it was found under (errors name the field as the file spells it, and the
/// object as `what` says: made only for an error, as files have tens of thousands of
/// objects).
fn integer<'a, 'k>(field: impl Fn(&str) -> Option<&'a Json>, keys: &[&'k str], what: impl Fn() -> String) -> Result<(u64, &'k str), ReadError> {
    let found = keys.iter().find_map(|&k| field(k).map(|v| (k, v)));
    match found {
        Some((k, v)) => v.as_u64().map(|n| (n, k)).ok_or_else(|| shape(format!("{}: `{k}` is {v}, not a non-negative integer", what()))),
        None => Err(shape(format!("{} has no {}", what(), keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(" or ")))),
    }
}

/// `sum + n`, or the error that the nodes' `key` add up to more than a `u64` holds.
fn add(sum: u64, n: u64, key: &str, unit: &str) -> Result<u64, ReadError> {
    sum.checked_add(n).ok_or_else(|| shape(format!("the nodes' `{key}` add up to more than 2^64 - 1{unit}: too large")))
}

/// Reads a node-link JSON graph of either kind.
pub fn parse(text: &str) -> Result<BenchGraph, ReadError> {
    graph_of(&read(text)?)
}

/// [`parse`] on the file already read.
fn graph_of(file: &File) -> Result<BenchGraph, ReadError> {
    let nodes = file.nodes.as_ref().ok_or_else(|| shape("no `nodes` array"))?;
    let links = file.links.as_ref().ok_or_else(|| shape("no `links` array"))?;
    let mut by_id: BTreeMap<u64, u64> = BTreeMap::new();
    // Every peak is at most the sum of the sizes: it must fit a u64 for peaks to be exact.
    let mut total = 0u64;
    for (i, node) in nodes.iter().enumerate() {
        let what = || format!("nodes[{i}]");
        let (id, _) = integer(|k| node.field(k), &["id", "name"], what)?;
        let (size, key) = integer(|k| node.field(k), &["out_cost", "cost_ram"], what)?;
        total = add(total, size, key, " bytes")?;
        if by_id.insert(id, size).is_some() {
            return Err(shape(format!("{}: node id {id} appears twice", what())));
        }
    }
    let ids: Vec<u64> = by_id.keys().copied().collect();
    let index = |id: u64, what: &dyn Fn() -> String| -> Result<Node, ReadError> {
        ids.binary_search(&id).map(|i| i as Node).map_err(|_| shape(format!("{} names node {id}, which does not exist", what())))
    };
    let mut values: Vec<DagValue> =
        (0..ids.len()).map(|i| DagValue { size: by_id[&ids[i]], def: Some(i as Node), readers: Vec::new(), to_end: false }).collect();
    for (i, link) in links.iter().enumerate() {
        let what = || format!("links[{i}]");
        let source = index(integer(|k| link.field(k), &["source", "0"], what)?.0, &what)?;
        let target = index(integer(|k| link.field(k), &["target", "1"], what)?.0, &what)?;
        values[source as usize].readers.push(target);
    }
    let graph = file.graph.as_ref();
    let name = graph.and_then(|g| g.get("name")).and_then(Json::as_str).map(str::to_string);
    let reference = match graph.and_then(|g| g.get("order")) {
        None | Some(Json::Null) => None,
        Some(order) => {
            let entries = order.as_array().ok_or_else(|| shape("`graph.order` is not an array"))?;
            let order = entries
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let what = || format!("graph.order[{i}]");
                    let id = e.as_u64().ok_or_else(|| shape(format!("{} is {e}, not a node id", what())))?;
                    index(id, &what)
                })
                .collect::<Result<Vec<_>, _>>()?;
            Some(order)
        }
    };
    let dag = Dag::new(ids.len(), [], values)?;
    Ok(BenchGraph { name, ids, links: links.len(), dag, reference })
}

/// A graph read as a rematerialisation problem.
#[derive(Clone, Debug)]
pub struct RematGraph {
    /// `graph.name`, if the file has one.
    pub name: Option<String>,
    /// The file's id of each problem node (problem nodes are in the plain order).
    pub ids: Vec<u64>,
    pub links: usize,
    pub problem: Problem,
}

/// Reads a node-link JSON graph of either kind as a [`Problem`]: one node per file node in
/// the plain order (see the module doc), costing `cost_cpu` (training graphs) or `duration`
/// (random layered graphs), forward unless `backward` is true, and writing one value of
/// `cost_ram` / `out_cost` bytes read by its links' targets. Every node may be recomputed,
/// as in Checkmate's MILP (the evaluation rule forbids nothing; the optimum it reports is
/// over that space).
pub fn parse_remat(text: &str) -> Result<RematGraph, ReadError> {
    let file = read(text)?;
    let graph = graph_of(&file)?;
    let nodes = file.nodes.as_ref().ok_or_else(|| shape("no `nodes` array"))?;
    let mut by_id: BTreeMap<u64, (u64, bool)> = BTreeMap::new();
    // One plain step's cost must fit a u64 (the overhead and its bound are over it).
    let mut total = 0u64;
    for (i, node) in nodes.iter().enumerate() {
        let what = || format!("nodes[{i}]");
        let (id, _) = integer(|k| node.field(k), &["id", "name"], what)?;
        let (cost, key) = integer(|k| node.field(k), &["cost_cpu", "duration"], what)?;
        total = add(total, cost, key, "")?;
        let backward = match &node.backward {
            None => false,
            Some(b) => b.as_bool().ok_or_else(|| shape(format!("{}: `backward` is {b}, not true or false", what())))?,
        };
        by_id.insert(id, (cost, backward));
    }
    let dag = &graph.dag;
    let ascending: Vec<Node> = (0..dag.nodes() as Node).collect();
    let order = match &graph.reference {
        _ if dag.peak(&ascending).is_ok() => ascending,
        Some(order) if dag.peak(order).is_ok() => order.clone(),
        _ => dag.smallest_first(),
    };
    let mut rank = vec![0 as Node; order.len()];
    for (position, &node) in order.iter().enumerate() {
        rank[node as usize] = position as Node;
    }
    let ids: Vec<u64> = order.iter().map(|&k| graph.ids[k as usize]).collect();
    let problem_nodes = ids
        .iter()
        .map(|id| {
            let (cost, backward) = by_id[id];
            NodeInfo { cost, recomputable: true, forward: !backward }
        })
        .collect();
    let mut values: Vec<DagValue> = vec![DagValue { size: 0, def: None, readers: Vec::new(), to_end: false }; order.len()];
    for value in dag.values() {
        let def = value.def.map(|d| rank[d as usize]).expect("every file value has a writer");
        let readers = value.readers.iter().map(|&r| rank[r as usize]).collect();
        values[def as usize] = DagValue { size: value.size, def: Some(def), readers, to_end: false };
    }
    Ok(RematGraph { name: graph.name, ids, links: graph.links, problem: Problem { nodes: problem_nodes, values, shares: Vec::new() } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_kinds_are_read() {
        let layered = r#"{"directed": true, "multigraph": false,
            "graph": {"name": "g", "order": [0, 2, 3, 1]},
            "nodes": [{"out_cost": 5, "name": 0}, {"out_cost": 1, "name": 1}, {"out_cost": 7, "name": 2}, {"out_cost": 2, "name": 3}],
            "links": [{"0": 0, "1": 2}, {"0": 0, "1": 3}, {"0": 2, "1": 1}, {"0": 3, "1": 1}]}"#;
        let g = parse(layered).unwrap();
        assert_eq!((g.ids.len(), g.links, g.name.as_deref()), (4, 4, Some("g")));
        let reference = g.reference.clone().unwrap();
        // 0; 0+2; 0+2+3 (0 dies at 3); 2+3+1.
        assert_eq!(g.dag.peak(&reference), Ok(14));
        assert_eq!(g.dag.smallest_first(), vec![0, 2, 3, 1]);

        let model = r#"{"nodes": [{"id": 10, "cost_ram": 3}, {"id": 11, "cost_ram": 4}],
            "links": [{"source": 10, "target": 11}], "graph": {}}"#;
        let g = parse(model).unwrap();
        assert_eq!((g.ids.clone(), g.reference.is_none()), (vec![10, 11], true));
        assert_eq!(g.dag.peak(&[0, 1]), Ok(7));
    }

    #[test]
    fn both_kinds_are_read_as_remat_problems() {
        let model = r#"{"directed": true, "graph": {"name": "m"},
            "nodes": [{"id": 0, "name": "a", "backward": false, "cost_cpu": 5, "cost_ram": 100},
                      {"id": 1, "name": "Loss", "backward": true, "cost_cpu": 1, "cost_ram": 4},
                      {"id": 2, "name": "a_backward", "backward": true, "cost_cpu": 7, "cost_ram": 100}],
            "links": [{"source": 0, "target": 1}, {"source": 0, "target": 2}, {"source": 1, "target": 2}]}"#;
        let g = parse_remat(model).unwrap();
        assert_eq!((g.ids.clone(), g.links, g.name.as_deref()), (vec![0, 1, 2], 3, Some("m")));
        let nodes: Vec<(u64, bool, bool)> = g.problem.nodes.iter().map(|n| (n.cost, n.recomputable, n.forward)).collect();
        assert_eq!(nodes, vec![(5, true, true), (1, true, false), (7, true, false)]);
        assert_eq!(g.problem.values[0], DagValue { size: 100, def: Some(0), readers: vec![1, 2], to_end: false });
        // 0: 100; 1: 100 + 4; 2: 100 + 4 + 100.
        assert_eq!(crate::solve::remat::evaluate(&g.problem, &[0, 1, 2]).unwrap().peak, 204);

        // Ids ascending is not an order here (1 is the sink): the problem follows graph.order.
        let layered = r#"{"graph": {"order": [0, 2, 1]},
            "nodes": [{"out_cost": 5, "duration": 3, "name": 0}, {"out_cost": 1, "duration": 0, "name": 1},
                      {"out_cost": 7, "duration": 2, "name": 2}],
            "links": [{"0": 0, "1": 2}, {"0": 2, "1": 1}, {"0": 0, "1": 1}]}"#;
        let g = parse_remat(layered).unwrap();
        assert_eq!(g.ids, vec![0, 2, 1]);
        assert_eq!(g.problem.nodes.iter().map(|n| n.cost).collect::<Vec<_>>(), vec![3, 2, 0]);
        assert_eq!(g.problem.values[1], DagValue { size: 7, def: Some(1), readers: vec![2], to_end: false });
        assert!(g.problem.nodes.iter().all(|n| n.forward && n.recomputable));

        let err = |text: &str| parse_remat(text).unwrap_err().to_string();
        assert_eq!(err(r#"{"nodes": [{"id": 0, "cost_ram": 1}], "links": []}"#), "nodes[0] has no `cost_cpu` or `duration`");
        assert_eq!(
            err(r#"{"nodes": [{"id": 0, "cost_ram": 1, "cost_cpu": 1, "backward": 2}], "links": []}"#),
            "nodes[0]: `backward` is 2, not true or false"
        );
        assert_eq!(parse_remat("{\n  \"nodes\": [,]}").unwrap_err().location(), Some((2, 13)));
    }

    /// Errors name a field as the file spells it (`cost_ram`, not `out_cost`, which the
    /// other kind of file has), and sums past 2^64 - 1 are too large, not clamped or wrapped.
    #[test]
    fn fields_as_spelled_and_sums_too_large() {
        let err = |text: &str| parse_remat(text).unwrap_err().to_string();
        assert_eq!(err(r#"{"nodes": [{"id": 0, "cost_ram": -3}], "links": []}"#), "nodes[0]: `cost_ram` is -3, not a non-negative integer");
        assert_eq!(err(r#"{"nodes": [{"name": 0, "out_cost": 1.5}], "links": []}"#), "nodes[0]: `out_cost` is 1.5, not a non-negative integer");
        assert_eq!(
            err(r#"{"nodes": [{"id": 0, "cost_ram": 1, "cost_cpu": 1}, {"id": 1, "cost_ram": 1, "cost_cpu": "x"}], "links": []}"#),
            "nodes[1]: `cost_cpu` is \"x\", not a non-negative integer"
        );
        let big = u64::MAX / 2 + 1;
        let two = |ram: u64, cpu: u64| {
            format!(r#"{{"nodes": [{{"id": 0, "cost_ram": {ram}, "cost_cpu": {cpu}}}, {{"id": 1, "cost_ram": {ram}, "cost_cpu": {cpu}}}], "links": [{{"source": 0, "target": 1}}]}}"#)
        };
        assert_eq!(err(&two(big, 1)), "the nodes' `cost_ram` add up to more than 2^64 - 1 bytes: too large");
        assert_eq!(err(&two(1, big)), "the nodes' `cost_cpu` add up to more than 2^64 - 1: too large");
        let g = parse_remat(&two(big - 1, big - 1)).unwrap();
        assert_eq!(crate::solve::remat::evaluate(&g.problem, &[0, 1]).unwrap().peak, u64::MAX - 1);
    }

    #[test]
    fn malformed_files_are_clear_errors() {
        let err = |text: &str| parse(text).unwrap_err().to_string();
        assert!(err("{").starts_with("not valid JSON"));
        assert_eq!(err(r#"{"links": []}"#), "no `nodes` array");
        assert_eq!(err(r#"{"nodes": [{"id": 0}], "links": []}"#), "nodes[0] has no `out_cost` or `cost_ram`");
        assert_eq!(err(r#"{"nodes": [{"id": -1, "cost_ram": 1}], "links": []}"#), "nodes[0]: `id` is -1, not a non-negative integer");
        assert_eq!(
            err(r#"{"nodes": [{"id": 0, "cost_ram": 1}], "links": [{"source": 0, "target": 5}]}"#),
            "links[0] names node 5, which does not exist"
        );
        assert_eq!(
            err(r#"{"nodes": [{"id": 0, "cost_ram": 1}, {"id": 1, "cost_ram": 1}], "links": [{"source": 0, "target": 1}, {"source": 1, "target": 0}]}"#),
            "the graph has a cycle through node 0"
        );
    }
}
