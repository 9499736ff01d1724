//! An ensemble's `[ensemble_scheduling]`: the steps of a pipeline of other models and
//! accelerators, wired by tensor names, as Triton's `ensemble_scheduling` declares
//! them. A pure check over the parsed section, with every size bounded.
//!
//! ```toml
//! platform = "ensemble"
//! max_batch_size = 0
//! [[input]]
//! name = "IMAGE"
//! data_type = "TYPE_UINT8"
//! dims = [8, 8]
//! [[output]]
//! name = "SCORES"
//! data_type = "TYPE_FP32"
//! dims = [10]
//! [[ensemble_scheduling.step]]
//! model_name = "sobel"                            # a model or a built-in accelerator
//! input_map = { INPUT0 = "IMAGE" }                # step input  <- ensemble tensor
//! output_map = { OUTPUT0 = "EDGES" }              # step output -> ensemble tensor
//! parameters = { width = 8, height = 8 }          # a built-in's parameters
//! [[ensemble_scheduling.step]]
//! model_name = "edges_score"
//! input_map = { EDGES = "EDGES" }
//! output_map = { SCORES = "SCORES" }
//! ```
//!
//! What is checked here, from the config alone: every step maps at least one input
//! and one output; every tensor a step reads is an ensemble input or another step's
//! output; no tensor is written twice or written over an ensemble input; every
//! ensemble output is written; the steps form no cycle (they are put in an order
//! where each runs after the steps it reads from). What needs the other models —
//! that a step's model exists, that its tensors' types and dims agree with the
//! tensors mapped to them — the node checks when it resolves the ensemble against its
//! catalog. Not here: running it (the node's `core::ensemble`).

use std::collections::BTreeMap;

use accel::tensors::TensorSpec;
use serde::Deserialize;

/// Most steps an ensemble may have.
pub const STEPS_MAX: usize = 16;
/// Most tensors one step may map (inputs and outputs each).
pub const STEP_TENSORS_MAX: usize = 16;
/// Most parameters one step may give a built-in.
pub const STEP_PARAMS_MAX: usize = 16;

/// A checked ensemble: its steps in an order in which each runs after every step
/// whose outputs it reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Ensemble {
    pub steps: Vec<Step>,
}

/// One step: a model (or built-in accelerator) and how its tensors map to the
/// ensemble's.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub model_name: String,
    /// (the step's input, the ensemble tensor it reads), sorted by the step's input.
    pub input_map: Vec<(String, String)>,
    /// (the step's output, the ensemble tensor it writes), sorted by the step's output.
    pub output_map: Vec<(String, String)>,
    /// A built-in accelerator's parameters, `name = value` as `/v1/fn` takes them.
    pub parameters: Vec<(String, String)>,
}

/// `[ensemble_scheduling]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Scheduling {
    step: Vec<RawStep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    model_name: String,
    /// Triton's: -1 (the latest) or the one version a model has here, 1.
    #[serde(default = "latest")]
    model_version: i64,
    input_map: BTreeMap<String, String>,
    output_map: BTreeMap<String, String>,
    #[serde(default)]
    parameters: BTreeMap<String, toml::Value>,
}

fn latest() -> i64 {
    -1
}

impl Scheduling {
    /// Checks the steps against the ensemble's own `inputs` and `outputs`.
    pub(crate) fn check(
        self,
        folder: &str,
        inputs: &[TensorSpec],
        outputs: &[TensorSpec],
    ) -> Result<Ensemble, String> {
        if self.step.is_empty() || self.step.len() > STEPS_MAX {
            return Err(format!(
                "ensemble_scheduling.step: an ensemble has 1 to {STEPS_MAX} steps, this one {}",
                self.step.len()
            ));
        }
        let mut steps = Vec::with_capacity(self.step.len());
        for (i, raw) in self.step.into_iter().enumerate() {
            steps.push(step(folder, i, raw)?);
        }
        let mut writer: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, s) in steps.iter().enumerate() {
            for (_, tensor) in &s.output_map {
                if inputs.iter().any(|t| &t.name == tensor) {
                    return Err(format!(
                        "ensemble_scheduling.step[{i}] ({}): output_map writes `{tensor}`, an input of the ensemble",
                        s.model_name
                    ));
                }
                if let Some(j) = writer.insert(tensor, i) {
                    return Err(format!(
                        "ensemble_scheduling: tensor `{tensor}` is written by step[{j}] and step[{i}]"
                    ));
                }
            }
        }
        for out in outputs {
            if !writer.contains_key(out.name.as_str()) {
                return Err(format!(
                    "ensemble_scheduling: output `{}` of the ensemble is written by no step",
                    out.name
                ));
            }
        }
        for (i, s) in steps.iter().enumerate() {
            for (_, tensor) in &s.input_map {
                let known = inputs.iter().any(|t| &t.name == tensor)
                    || writer.contains_key(tensor.as_str());
                if !known {
                    return Err(format!(
                        "ensemble_scheduling.step[{i}] ({}): input_map reads `{tensor}`, which is neither an input of the ensemble nor written by a step",
                        s.model_name
                    ));
                }
            }
        }
        let order = run_order(&steps, &writer)?;
        assert_eq!(order.len(), steps.len(), "each step once");
        assert!(writer.len() >= outputs.len(), "every output written");
        let mut slots: Vec<Option<Step>> = steps.into_iter().map(Some).collect();
        let steps = order
            .into_iter()
            .map(|i| slots[i].take().expect("each step once"))
            .collect();
        Ok(Ensemble { steps })
    }
}

/// One step as written, checked on its own.
fn step(folder: &str, i: usize, raw: RawStep) -> Result<Step, String> {
    let at = format!("ensemble_scheduling.step[{i}]");
    if raw.model_name.is_empty() || raw.model_name == folder {
        return Err(format!(
            "{at}: model_name `{}` must name another model or accelerator",
            raw.model_name
        ));
    }
    if raw.model_version != -1 && raw.model_version != 1 {
        return Err(format!(
            "{at}: model_version {}: a model here has one version, 1 (or -1, the latest)",
            raw.model_version
        ));
    }
    for (what, map) in [
        ("input_map", &raw.input_map),
        ("output_map", &raw.output_map),
    ] {
        if map.is_empty() || map.len() > STEP_TENSORS_MAX {
            return Err(format!(
                "{at}: {what}: a step maps 1 to {STEP_TENSORS_MAX} tensors, this one {}",
                map.len()
            ));
        }
        if let Some((k, v)) = map.iter().find(|(k, v)| k.is_empty() || v.is_empty()) {
            return Err(format!("{at}: {what}: `{k}` = `{v}`: names are non-empty"));
        }
    }
    if raw.parameters.len() > STEP_PARAMS_MAX {
        return Err(format!("{at}: parameters: at most {STEP_PARAMS_MAX}"));
    }
    debug_assert!(!raw.input_map.is_empty() && !raw.output_map.is_empty());
    let mut parameters = Vec::with_capacity(raw.parameters.len());
    for (name, value) in raw.parameters {
        let text = match value {
            toml::Value::Integer(v) => v.to_string(),
            toml::Value::Float(v) => v.to_string(),
            toml::Value::String(v) => v,
            _ => return Err(format!("{at}: parameters.{name}: a number or a string")),
        };
        parameters.push((name, text));
    }
    Ok(Step {
        model_name: raw.model_name,
        input_map: raw.input_map.into_iter().collect(),
        output_map: raw.output_map.into_iter().collect(),
        parameters,
    })
}

/// The steps in an order where each comes after the writers of what it reads (the
/// order written where that already holds), or the steps of a cycle.
fn run_order(steps: &[Step], writer: &BTreeMap<&str, usize>) -> Result<Vec<usize>, String> {
    let needs: Vec<Vec<usize>> = steps
        .iter()
        .map(|s| {
            s.input_map
                .iter()
                .filter_map(|(_, t)| writer.get(t.as_str()).copied())
                .collect()
        })
        .collect();
    let mut done = vec![false; steps.len()];
    let mut order = Vec::with_capacity(steps.len());
    // At most one step becomes ready per pass: at most `steps.len()` passes.
    for _ in 0..steps.len() {
        let ready = (0..steps.len()).find(|&i| !done[i] && needs[i].iter().all(|&j| done[j]));
        let Some(i) = ready else { break };
        done[i] = true;
        order.push(i);
    }
    if order.len() < steps.len() {
        let stuck: Vec<String> = (0..steps.len())
            .filter(|&i| !done[i])
            .map(|i| format!("step[{i}] ({})", steps[i].model_name))
            .collect();
        return Err(format!(
            "ensemble_scheduling: {} read each other's outputs: a cycle",
            stuck.join(", ")
        ));
    }
    debug_assert!(order
        .iter()
        .enumerate()
        .all(|(k, &i)| needs[i].iter().all(|j| order[..k].contains(j))));
    Ok(order)
}

#[cfg(test)]
mod tests {
    use crate::config::parse;

    const HEAD: &str = r#"
platform = "ensemble"
max_batch_size = 0
[[input]]
name = "IMAGE"
data_type = "TYPE_UINT8"
dims = [8, 8]
[[output]]
name = "SCORES"
data_type = "TYPE_FP32"
dims = [10]
"#;

    const SOBEL: &str = r#"
[[ensemble_scheduling.step]]
model_name = "sobel"
input_map = { INPUT0 = "IMAGE" }
output_map = { OUTPUT0 = "EDGES" }
parameters = { width = 8, height = 8 }
"#;

    const SCORE: &str = r#"
[[ensemble_scheduling.step]]
model_name = "edges_score"
input_map = { EDGES = "EDGES" }
output_map = { SCORES = "SCORES" }
"#;

    fn err(text: &str) -> String {
        parse("pipeline", text).unwrap_err()
    }

    #[test]
    fn steps_are_put_in_the_order_of_their_tensors() {
        // Written consumer first: run producer first.
        let c = parse("pipeline", &format!("{HEAD}{SCORE}{SOBEL}")).unwrap();
        let steps = c.ensemble.unwrap().steps;
        let names: Vec<_> = steps.iter().map(|s| s.model_name.as_str()).collect();
        assert_eq!(names, ["sobel", "edges_score"]);
        assert_eq!(steps[0].input_map, [("INPUT0".into(), "IMAGE".into())]);
        assert_eq!(steps[0].output_map, [("OUTPUT0".into(), "EDGES".into())]);
        assert_eq!(
            steps[0].parameters,
            [("height".into(), "8".into()), ("width".into(), "8".into())]
        );
        assert!(steps[1].parameters.is_empty());
        assert_eq!(c.tensors.outputs[0].name, "SCORES");
        // A model that is not an ensemble has none.
        let plain = HEAD.replace("platform = \"ensemble\"", "");
        assert_eq!(parse("m", &plain).unwrap().ensemble, None);
    }

    #[test]
    fn a_wrong_ensemble_is_refused_naming_what() {
        let e = err(HEAD);
        assert!(e.contains("needs its [ensemble_scheduling]"), "{e}");
        let e = err(&format!(
            "{}{SOBEL}{SCORE}",
            HEAD.replace("platform = \"ensemble\"\n", "")
        ));
        assert!(e.contains("only for platform = \"ensemble\""), "{e}");
        let e = err(&format!(
            "{}{SOBEL}{SCORE}",
            HEAD.replace("\"ensemble\"", "\"pytorch\"")
        ));
        assert!(e.contains("platform: `pytorch`"), "{e}");
        let e = err(&format!("backend = \"tract\"\n{HEAD}{SOBEL}{SCORE}"));
        assert!(e.contains("takes no backend"), "{e}");
        // A tensor read before any step writes it.
        let e = err(&format!("{HEAD}{}", SCORE));
        assert!(e.contains("reads `EDGES`, which is neither"), "{e}");
        // An output no step writes.
        let e = err(&format!("{HEAD}{SOBEL}"));
        assert!(
            e.contains("output `SCORES` of the ensemble is written by no step"),
            "{e}"
        );
        // Written twice, or over an input.
        let e = err(&format!("{HEAD}{SOBEL}{SOBEL}{SCORE}"));
        assert!(
            e.contains("tensor `EDGES` is written by step[0] and step[1]"),
            "{e}"
        );
        let e = err(&format!(
            "{HEAD}{}{SCORE}",
            SOBEL.replace("\"EDGES\" }", "\"IMAGE\" }")
        ));
        assert!(e.contains("an input of the ensemble"), "{e}");
        // Itself, another version, nothing mapped, an unknown key.
        let e = err(&format!(
            "{HEAD}{}{SCORE}",
            SOBEL.replace("\"sobel\"", "\"pipeline\"")
        ));
        assert!(e.contains("must name another model"), "{e}");
        let e = err(&format!("{HEAD}{SOBEL}model_version = 2\n{SCORE}"));
        assert!(e.contains("model_version 2"), "{e}");
        let e = err(&format!(
            "{HEAD}{}{SCORE}",
            SOBEL.replace("{ INPUT0 = \"IMAGE\" }", "{}")
        ));
        assert!(e.contains("input_map: a step maps 1 to 16"), "{e}");
        let e = err(&format!("{HEAD}{SOBEL}colour = 1\n{SCORE}"));
        assert!(e.contains("unknown field `colour`"), "{e}");
        let e = err(&format!(
            "{HEAD}{}{SCORE}",
            SOBEL.replace("width = 8", "width = [8]")
        ));
        assert!(e.contains("parameters.width: a number or a string"), "{e}");
        let many = SOBEL.repeat(super::STEPS_MAX + 1);
        assert!(err(&format!("{HEAD}{many}")).contains("1 to 16 steps"));
    }

    #[test]
    fn a_cycle_is_refused_naming_its_steps() {
        // A writes T1 from T2, B writes T2 from T1; SCORES from T1.
        let a = "[[ensemble_scheduling.step]]\nmodel_name = \"a\"\n\
                 input_map = { X = \"T2\" }\noutput_map = { Y = \"T1\" }\n";
        let b = "[[ensemble_scheduling.step]]\nmodel_name = \"b\"\n\
                 input_map = { X = \"T1\" }\noutput_map = { Y = \"T2\" }\n";
        let c = "[[ensemble_scheduling.step]]\nmodel_name = \"c\"\n\
                 input_map = { X = \"T1\", I = \"IMAGE\" }\noutput_map = { Y = \"SCORES\" }\n";
        let e = err(&format!("{HEAD}{a}{b}{c}"));
        assert!(
            e.contains("step[0] (a), step[1] (b), step[2] (c) read each other's outputs: a cycle"),
            "{e}"
        );
    }
}
