//! Which outputs a request asks for, and how each is answered: the protocol's
//! `outputs` list (HTTP JSON and gRPC alike), each output's own `binary_data` (HTTP)
//! and `classification` parameters, `binary_data_output` as the default.
//!
//! Rules (Triton's): with no `outputs` (or an empty list) every output of the model is
//! returned, each in the default encoding; with a list, exactly the outputs it names, in
//! its order, each in its own encoding. This module knows nothing about a model's
//! tensors: the front ends check the names against the model, and [`super::classify`]
//! turns an output into its top classes.

use std::borrow::Cow;
use std::sync::Arc;

use accel::tensors::DataType;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::VERSION;

/// Most classes one output may ask for: a classification answer is one string per
/// class, and an output has at most this many elements to rank anyway in practice.
pub const CLASS_COUNT_MAX: u64 = 1 << 16;

/// One requested output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub name: String,
    /// HTTP: its elements after the JSON, not in `data`.
    pub binary: bool,
    /// The classification extension: answer the top this many classes.
    pub class_count: Option<u32>,
    /// The labels of its classes, when classified and the model has a label file.
    pub labels: Option<Arc<[String]>>,
}

/// The outputs a request asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requested {
    /// `binary_data_output`: the encoding of outputs that do not say theirs.
    pub default_binary: bool,
    /// `None`: every output of the model.
    pub list: Option<Vec<Wanted>>,
    /// Whether the model's outputs lead with a batch axis (classes are per item).
    pub batched: bool,
}

impl Requested {
    /// The outputs to answer, in answer order, each with how it is answered: the
    /// requested ones in the request's order, else every one of `declared`.
    pub fn select<T>(&self, declared: Vec<(&str, T)>) -> Vec<(Wanted, T)> {
        let Some(list) = &self.list else {
            return declared
                .into_iter()
                .map(|(name, t)| {
                    let wanted = Wanted {
                        name: name.to_string(),
                        binary: self.default_binary,
                        class_count: None,
                        labels: None,
                    };
                    (wanted, t)
                })
                .collect();
        };
        let mut declared: Vec<Option<(&str, T)>> = declared.into_iter().map(Some).collect();
        let mut out = Vec::with_capacity(list.len());
        for wanted in list {
            let found = declared
                .iter_mut()
                .find(|d| d.as_ref().is_some_and(|(n, _)| *n == wanted.name))
                .and_then(Option::take);
            // The front end checked each name against the model, and that none repeats.
            debug_assert!(found.is_some(), "output {} checked", wanted.name);
            if let Some((_, t)) = found {
                out.push((wanted.clone(), t));
            }
        }
        out
    }
}

/// A request's `parameters.classification`/`["classification"]`: a class count.
pub fn class_count(value: Option<u64>, output: &str) -> Result<Option<u32>, String> {
    match value {
        None => Ok(None),
        Some(n) if (1..=CLASS_COUNT_MAX).contains(&n) => Ok(Some(n as u32)),
        Some(n) => Err(format!(
            "output {output}: classification {n} is not a class count from 1 to {CLASS_COUNT_MAX}"
        )),
    }
}

/// Request parameters other than the protocol's, for the accelerator.
pub(super) type Params<'p> = Vec<(&'p str, &'p Value)>;

/// One entry of a request's `outputs` (HTTP JSON), as the client sent it.
#[derive(Deserialize)]
pub(super) struct RawOutput {
    pub(super) name: String,
    #[serde(default)]
    pub(super) parameters: Option<Map<String, Value>>,
}

/// Reads the HTTP request's `parameters` (only `binary_data_output` is the
/// protocol's; the rest are handed back for the accelerator) and `outputs`;
/// `check` refuses an output name the model does not have.
pub(super) fn from_json<'p>(
    parameters: Option<&'p Map<String, Value>>,
    outputs: Option<&[RawOutput]>,
    check: impl Fn(&str) -> Result<(), String>,
) -> Result<(Requested, Params<'p>), String> {
    let mut requested = Requested::default();
    let mut others = Vec::new();
    for (key, value) in parameters.into_iter().flatten() {
        if key == "binary_data_output" {
            requested.default_binary = value
                .as_bool()
                .ok_or("request parameter binary_data_output must be a boolean")?;
        } else {
            others.push((key.as_str(), value));
        }
    }
    let outputs = outputs.unwrap_or_default();
    if outputs.is_empty() {
        return Ok((requested, others));
    }
    let mut list: Vec<Wanted> = Vec::with_capacity(outputs.len());
    for output in outputs {
        check(&output.name)?;
        if list.iter().any(|w| w.name == output.name) {
            return Err(format!(
                "output {} is requested more than once",
                output.name
            ));
        }
        let param = |key: &str| output.parameters.as_ref().and_then(|p| p.get(key));
        let binary = match param("binary_data") {
            None => requested.default_binary,
            Some(v) => v
                .as_bool()
                .ok_or("output parameter binary_data must be a boolean")?,
        };
        let classes = match param("classification") {
            None => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                format!(
                    "output {}: classification must be a positive integer",
                    output.name
                )
            })?),
        };
        list.push(Wanted {
            name: output.name.clone(),
            binary,
            class_count: class_count(classes, &output.name)?,
            labels: None,
        });
    }
    requested.list = Some(list);
    Ok((requested, others))
}

/// One output tensor of an answer.
#[derive(Debug)]
pub struct OutTensor<'o> {
    pub wanted: Wanted,
    pub datatype: DataType,
    pub shape: Vec<u64>,
    /// Its elements in the binary form (`accel::tensors`).
    pub bytes: Cow<'o, [u8]>,
}

/// One output of a call, as the model gives it: name, datatype, shape, bytes.
pub type Given<'o> = (&'o str, DataType, Vec<u64>, &'o [u8]);

/// The tensors of an answer: the outputs `requested` picks from `given`, each with
/// how it is answered (every front end answers through this).
/// `classify` turns a tensor whose output asked for classes into its top classes (the
/// classification extension's `classify::top`, given by the caller so that this module
/// stays below it).
pub fn answer<'o>(
    requested: &Requested,
    given: Vec<Given<'o>>,
    classify: impl Fn(OutTensor<'o>, bool) -> OutTensor<'o>,
) -> Vec<OutTensor<'o>> {
    let given = given
        .into_iter()
        .map(|(name, datatype, shape, bytes)| (name, (datatype, shape, bytes)))
        .collect();
    requested
        .select(given)
        .into_iter()
        .map(|(wanted, (datatype, shape, bytes))| {
            let t = OutTensor {
                wanted,
                datatype,
                shape,
                bytes: Cow::Borrowed(bytes),
            };
            if t.wanted.class_count.is_some() {
                classify(t, requested.batched)
            } else {
                t
            }
        })
        .collect()
}

/// Writes an HTTP answer with `tensors` into `dst`; the JSON part's length when binary
/// data follows it (for `Inference-Header-Content-Length`), `None` for JSON only.
pub fn write_json(
    model: &str,
    id: Option<&str>,
    tensors: &[OutTensor<'_>],
    dst: &mut Vec<u8>,
) -> Option<usize> {
    let mut head = Map::new();
    if let Some(id) = id {
        head.insert("id".into(), Value::from(id));
    }
    head.insert("model_name".into(), Value::from(model));
    head.insert("model_version".into(), Value::from(VERSION));
    let mut list = Vec::with_capacity(tensors.len());
    for t in tensors {
        let mut tensor = Map::new();
        tensor.insert("name".into(), Value::from(t.wanted.name.as_str()));
        tensor.insert("datatype".into(), Value::from(t.datatype.name()));
        tensor.insert("shape".into(), Value::from(t.shape.clone()));
        if t.wanted.binary {
            let mut p = Map::new();
            p.insert("binary_data_size".into(), Value::from(t.bytes.len()));
            tensor.insert("parameters".into(), Value::Object(p));
        } else {
            tensor.insert(
                "data".into(),
                super::elements::to_json(t.datatype, &t.bytes),
            );
        }
        list.push(Value::Object(tensor));
    }
    head.insert("outputs".into(), Value::Array(list));
    let start = dst.len();
    serde_json::to_writer(&mut *dst, &head).expect("serialising JSON into a Vec cannot fail");
    if !tensors.iter().any(|t| t.wanted.binary) {
        return None;
    }
    let json_len = dst.len() - start;
    for t in tensors.iter().filter(|t| t.wanted.binary) {
        dst.extend_from_slice(&t.bytes);
    }
    Some(json_len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: Value) -> Result<Requested, String> {
        let req: super::super::infer::RawRequest = serde_json::from_value(body).unwrap();
        let check = |name: &str| {
            if ["a", "b", "c"].contains(&name) {
                Ok(())
            } else {
                Err(format!("no output {name}"))
            }
        };
        from_json(req.parameters.as_ref(), req.outputs.as_deref(), check).map(|(r, _)| r)
    }

    #[test]
    fn each_output_says_its_own_encoding_and_unrequested_ones_are_left_out() {
        let r = parse(
            json!({"inputs": [], "parameters": {"binary_data_output": true},
            "outputs": [{"name": "c", "parameters": {"binary_data": false}}, {"name": "a"}]}),
        )
        .unwrap();
        let picked = r.select(vec![("a", 1), ("b", 2), ("c", 3)]);
        let got: Vec<(&str, bool, i32)> = picked
            .iter()
            .map(|(w, t)| (w.name.as_str(), w.binary, *t))
            .collect();
        assert_eq!(got, [("c", false, 3), ("a", true, 1)]);
        // No list: every output, in the default encoding.
        let all = parse(json!({"inputs": [], "outputs": []})).unwrap();
        assert_eq!(all.select(vec![("a", 1), ("b", 2)]).len(), 2);
        assert!(all.select(vec![("a", 1)]).iter().all(|(w, _)| !w.binary));
    }

    #[test]
    fn bad_output_requests_are_refused() {
        let err = |outputs: Value| parse(json!({"inputs": [], "outputs": outputs})).unwrap_err();
        assert!(err(json!([{"name": "z"}])).contains("no output z"));
        assert!(err(json!([{"name": "a"}, {"name": "a"}])).contains("more than once"));
        let flag = err(json!([{"name": "a", "parameters": {"binary_data": 1}}]));
        assert!(flag.contains("binary_data must be a boolean"), "{flag}");
        let classes = err(json!([{"name": "a", "parameters": {"classification": 0}}]));
        assert!(classes.contains("not a class count"), "{classes}");
        let r = parse(
            json!({"inputs": [], "outputs": [{"name": "b", "parameters": {"classification": 3}}]}),
        );
        assert_eq!(r.unwrap().list.unwrap()[0].class_count, Some(3));
    }

    #[test]
    fn binary_outputs_follow_the_json_in_answer_order() {
        let t = |name: &str, binary: bool, bytes: &'static [u8]| OutTensor {
            wanted: Wanted {
                name: name.into(),
                binary,
                class_count: None,
                labels: None,
            },
            datatype: DataType::Uint8,
            shape: vec![bytes.len() as u64],
            bytes: Cow::Borrowed(bytes),
        };
        let mut dst = Vec::new();
        let tensors = [
            t("x", true, b"12"),
            t("y", false, b"3"),
            t("z", true, b"45"),
        ];
        let n = write_json("m", Some("7"), &tensors, &mut dst).unwrap();
        let v: Value = serde_json::from_slice(&dst[..n]).unwrap();
        assert_eq!(v["outputs"][1]["data"], json!([51]));
        assert_eq!(v["outputs"][2]["parameters"]["binary_data_size"], 2);
        assert_eq!(&dst[n..], b"1245");
        let mut json_only = Vec::new();
        assert_eq!(
            write_json("m", None, &[t("y", false, b"3")], &mut json_only),
            None
        );
    }
}
