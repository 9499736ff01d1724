//! Finding the node through the registry, as BlastFunction's library asks its
//! Accelerators Registry for a device: with `NETACCEL_REGISTRY` and
//! `NETACCEL_FUNCTION` set (and no `NETACCEL_OPENCL_NODES`), the ICD binds an instance
//! of the function (`POST /v1/functions/{F}/instances`, spec/registry-api.md) and offers the
//! OpenCL devices of the node that binding names, at the remote OpenCL address the
//! node registered.
//!
//! Why bind rather than just read the node list: the registry decides which node's
//! device a program may use (utilisation, the function's query, reconfiguration), and
//! an instance is how it counts the program as a user of that slot. The instance is
//! `NETACCEL_INSTANCE` when set (the Kubernetes webhook sets it; posting an existing id
//! answers its binding and creates nothing), and is then the pod's to keep; otherwise
//! the registry names a new one, which this process deletes when it exits.
//!
//! Not done: following a migration of the instance while the program runs (an OpenCL
//! program's objects live on one node and cannot move with it).
//!
//! Every failure is one sentence on stderr naming the registry and the reason, and no
//! platform: a program then sees `clGetPlatformIDs` find nothing, as with an
//! unreachable node.

use std::sync::Mutex;
use std::time::Duration;

use registry_api::{origin_of, Binding, ErrorBody, InstanceSpec, Patience, Replicas, Try};

/// The registry's URL, or several replicas' comma-separated.
pub const REGISTRY_ENV: &str = "NETACCEL_REGISTRY";
/// The function whose instance the program is.
pub const FUNCTION_ENV: &str = "NETACCEL_FUNCTION";
/// The instance id to use (kept at exit) instead of a new one (deleted at exit).
pub const INSTANCE_ENV: &str = "NETACCEL_INSTANCE";
/// The registry's admin token, when it requires one for writes.
pub const TOKEN_ENV: &str = "NETACCEL_REGISTRY_TOKEN";
/// Registry replicas tried, at most.
const REPLICAS_MAX: usize = registry_api::leader::REPLICAS_MAX;
/// Longest wait for one answer: allocation may reconfigure a slot first.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// What to ask and whom, from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub registries: Vec<String>,
    pub function: String,
    pub instance: Option<String>,
    pub token: Option<String>,
}

impl Lookup {
    /// `None` when the registry lookup is not asked for (either variable unset or
    /// empty); `Err` for a setting that cannot work.
    pub fn from_env() -> Option<Result<Lookup, String>> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let (registry, function) = (var(REGISTRY_ENV)?, var(FUNCTION_ENV)?);
        Some(
            Lookup::new(
                &registry,
                &function,
                var(INSTANCE_ENV).as_deref(),
                var(TOKEN_ENV).as_deref(),
            )
            .map_err(|e| format!("{REGISTRY_ENV}={registry}, {FUNCTION_ENV}={function}: {e}")),
        )
    }

    pub fn new(
        registry: &str,
        function: &str,
        instance: Option<&str>,
        token: Option<&str>,
    ) -> Result<Lookup, String> {
        let registries: Vec<String> = registry
            .split(',')
            .map(|u| u.trim().trim_end_matches('/'))
            .filter(|u| !u.is_empty())
            .map(|u| match u.contains("://") {
                true => u.to_string(),
                false => format!("http://{u}"),
            })
            .collect();
        if registries.len() > REPLICAS_MAX {
            return Err(format!(
                "{REGISTRY_ENV} lists {} registries; at most {REPLICAS_MAX}",
                registries.len()
            ));
        }
        for name in std::iter::once(function).chain(instance) {
            registry_api::check_name("a registry name", name)
                .map_err(|why| format!("{name:?} is not a registry name: {why}"))?;
        }
        Ok(Lookup {
            registries,
            function: function.to_string(),
            instance: instance.map(str::to_string),
            token: token.map(str::to_string),
        })
    }
}

/// An instance this process created, deleted at exit.
struct Created {
    registry: String,
    function: String,
    id: String,
    token: Option<String>,
}

static CREATED: Mutex<Option<Created>> = Mutex::new(None);

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_connect(CONNECT_TIMEOUT)
        .timeout(ANSWER_TIMEOUT)
        .redirects(0)
        .user_agent(concat!("netaccel-opencl/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Reads the remote OpenCL address from a binding; `Err` says why there is none.
pub fn opencl_of(binding: &Binding) -> Result<String, String> {
    let id = &binding.id;
    let Some(node) = &binding.node else {
        return Err(format!(
            "instance {id} is bound to no slot (no compatible slot had room)"
        ));
    };
    match binding.opencl {
        Some(addr) => Ok(addr.to_string()),
        None => Err(format!(
            "instance {id} is bound to node {node}, which serves no remote OpenCL \
             (start it with --opencl)"
        )),
    }
}

/// What one registry replica answered to `POST …/instances`: the binding and whether
/// the instance is new (`201`), or a refusal in a sentence.
type Answer = Result<(Binding, bool), String>;

/// Binds an instance; answers the remote OpenCL address of its node, or why not (a
/// sentence naming the registry).
pub fn bind(lookup: &Lookup) -> Result<String, String> {
    let agent = agent();
    let replicas = Replicas::new(lookup.registries.clone());
    let path = format!("/v1/functions/{}/instances", lookup.function);
    let body = InstanceSpec {
        id: lookup.instance.clone(),
        node: None,
    };
    let mut answered_by = String::new();
    // Rounds until an election settles: a program started while the leader was just
    // killed binds once another replica leads.
    let answer = replicas.follow(Patience::ELECTION, |base| {
        answered_by = base.to_string();
        ask(&agent, base, &path, &body, lookup)
    });
    let (binding, created) = match answer {
        Ok(answer) => answer?,
        Err(failed) => {
            let mut failures = failed.unreachable;
            failures.extend(failed.refusal);
            return Err(failures.join("; "));
        }
    };
    let addr = opencl_of(&binding)
        .map_err(|e| format!("registry {answered_by}, function {}: {e}", lookup.function))?;
    if created && lookup.instance.is_none() {
        remember(&answered_by, lookup, &binding);
    }
    Ok(addr)
}

/// One `POST …/instances` to the replica at `base`.
fn ask(
    agent: &ureq::Agent,
    base: &str,
    path: &str,
    body: &InstanceSpec,
    lookup: &Lookup,
) -> Try<Answer, String> {
    let mut request = agent.post(&format!("{base}{path}"));
    if let Some(token) = &lookup.token {
        request = request.set("Authorization", &format!("Bearer {token}"));
    }
    let response = match request.send_json(body) {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(ureq::Error::Transport(e)) => {
            return Try::Unreachable(format!("registry {base} unreachable: {e}"))
        }
    };
    let status = response.status();
    let location = response.header("location").map(str::to_string);
    let text = response.into_string().unwrap_or_default();
    match status {
        200 | 201 => Try::Answer(
            serde_json::from_str::<Binding>(&text)
                .map(|b| (b, status == 201))
                .map_err(|e| {
                    format!("registry {base} sent a binding registry-api.md does not describe: {e}")
                }),
        ),
        // A follower: its Location names the leader, asked next.
        503 => Try::Unavailable {
            leader: location.as_deref().and_then(origin_of),
            error: format!("registry {base} does not lead"),
        },
        _ => {
            let why = serde_json::from_str::<ErrorBody>(&text).unwrap_or(ErrorBody {
                error: "no reason given".to_string(),
                code: String::new(),
            });
            Try::Answer(Err(format!(
                "registry {base} refused an instance of function {}: {status} {}: {}",
                lookup.function, why.code, why.error
            )))
        }
    }
}

/// Notes an instance this process created, and deletes it when the process exits.
fn remember(base: &str, lookup: &Lookup, binding: &Binding) {
    let id = &binding.id;
    *CREATED.lock().unwrap_or_else(|e| e.into_inner()) = Some(Created {
        registry: base.to_string(),
        function: lookup.function.clone(),
        id: id.to_string(),
        token: lookup.token.clone(),
    });
    // SAFETY: registering a function with no arguments that never unwinds. glibc runs
    // handlers a shared object registered when it is unloaded, if that comes first.
    unsafe { libc::atexit(release_at_exit) };
}

extern "C" fn release_at_exit() {
    // Nothing may unwind out of an atexit handler.
    let _ = std::panic::catch_unwind(|| {
        let Some(created) = CREATED.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let url = format!(
            "{}/v1/functions/{}/instances/{}",
            created.registry, created.function, created.id
        );
        let mut request = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(2))
            .build()
            .delete(&url);
        if let Some(token) = &created.token {
            request = request.set("Authorization", &format!("Bearer {token}"));
        }
        if let Err(e) = request.call() {
            eprintln!(
                "netaccel OpenCL: could not release instance {} of function {} at the registry: {e}",
                created.id, created.function
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read_and_checked() {
        let l = Lookup::new("127.0.0.1:7400, http://b:7400/", "f", Some("pod-1"), None).unwrap();
        assert_eq!(l.registries, ["http://127.0.0.1:7400", "http://b:7400"]);
        assert_eq!(l.instance.as_deref(), Some("pod-1"));
        assert!(Lookup::new("r", "f g", None, None)
            .unwrap_err()
            .contains("\"f g\""));
        assert!(Lookup::new("r", "f", Some("a/b"), None).is_err());
        let many = ["r"; 9].join(",");
        assert!(Lookup::new(&many, "f", None, None).is_err());
    }

    #[test]
    fn the_binding_must_name_a_node_that_serves_opencl() {
        let binding = |node: Option<&str>, opencl: Option<&str>| -> Binding {
            serde_json::from_value(serde_json::json!({"id": "f-1", "function": "f",
                "generation": 1, "node": node, "opencl": opencl}))
            .unwrap()
        };
        let bound = binding(Some("n1"), Some("10.0.0.1:9500"));
        assert_eq!(opencl_of(&bound).unwrap(), "10.0.0.1:9500");
        let no_opencl = binding(Some("n1"), None);
        assert!(opencl_of(&no_opencl)
            .unwrap_err()
            .contains("serves no remote OpenCL"));
        let unbound = binding(None, None);
        assert!(opencl_of(&unbound)
            .unwrap_err()
            .contains("bound to no slot"));
    }

    #[test]
    fn an_unreachable_registry_is_named_with_the_reason() {
        // A port nothing listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let l = Lookup::new(&format!("127.0.0.1:{port}"), "f", None, None).unwrap();
        let e = bind(&l).unwrap_err();
        assert!(
            e.contains(&format!("registry http://127.0.0.1:{port} unreachable")),
            "{e}"
        );
    }
}
