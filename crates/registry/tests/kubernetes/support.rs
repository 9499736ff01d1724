//! What the Kubernetes tests share: the control plane lock, registry replicas and
//! stand-in netaccel nodes, the objects the tests create, and the waits on what the
//! controllers do with them.

use super::*;

pub(crate) static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `test` on a fresh control plane, or skips (see `harness::available`).
pub(crate) fn with_control_plane<F, Fut>(test: F)
where
    F: FnOnce(ControlPlane) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !harness::available() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let plane = ControlPlane::start().await;
        tokio::time::timeout(Duration::from_secs(240), test(plane))
            .await
            .expect("the test took over 4 minutes");
    });
}

// ---- the registry and its stand-in nodes ----

pub(crate) struct Registry {
    pub(crate) child: Child,
    pub(crate) base: String,
    /// `Authorization` for writes (`--token`).
    pub(crate) auth: String,
    pub(crate) webhook: SocketAddr,
    pub(crate) log: PathBuf,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "registry log (last lines):\n{}",
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }
}

impl Registry {
    pub(crate) fn start(plane: &ControlPlane, extra: &[&str]) -> Registry {
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let webhook: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = plane.dir.join(format!("registry-{}.log", listen.port()));
        let file = std::fs::File::create(&log).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_netaccel-registry"))
            .args(["--listen", &listen.to_string(), "--lease-ms", "1500"])
            .args([
                "--kubernetes",
                "--kubeconfig",
                &plane.kubeconfig.to_string_lossy(),
            ])
            .args(["--webhook", &webhook.to_string()])
            .args(["--webhook-configuration", "netaccel"])
            .args([
                "--webhook-url",
                &format!("https://{webhook}/v1/admission/pods"),
            ])
            .args(["--log-level", "info"])
            .args(extra)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("starting netaccel-registry");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(webhook).is_err() || TcpStream::connect(listen).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "netaccel-registry exited ({status}):\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "netaccel-registry did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        let token = extra
            .iter()
            .position(|a| *a == "--token")
            .map(|i| extra[i + 1])
            .unwrap_or("none");
        Registry {
            child,
            auth: format!("Bearer {token}"),
            base: format!("http://{listen}"),
            webhook,
            log,
        }
    }

    /// Whether this replica leads (`netaccel_registry_leader` in `/metrics`).
    pub(crate) fn leads(&self) -> bool {
        ureq::get(&format!("{}/metrics", self.base))
            .call()
            .ok()
            .and_then(|r| r.into_string().ok())
            .is_some_and(|m| m.lines().any(|l| l == "netaccel_registry_leader 1"))
    }

    /// Waits until this replica leads (it takes the Lease at start when nobody holds it).
    pub(crate) async fn wait_leader(&self, within: Duration) -> Duration {
        let started = Instant::now();
        eventually("the registry leading", within, || async {
            self.leads().then_some(())
        })
        .await;
        started.elapsed()
    }

    pub(crate) fn get(&self, path: &str) -> Value {
        ureq::get(&format!("{}{path}", self.base))
            .call()
            .unwrap()
            .into_json()
            .unwrap()
    }
}

/// A stand-in netaccel node: renews its lease every 400 ms with its registration,
/// which the test may change (as a node reports a reconfiguration).
pub(crate) struct FakeNode {
    pub(crate) body: Arc<Mutex<Value>>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for FakeNode {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl FakeNode {
    pub(crate) fn set(&self, body: Value) {
        *self.body.lock().unwrap() = body;
    }
}

/// Accelerators the stand-in devices can load: anything else finds no slot.
pub(crate) const CATALOG: [&str; 4] = ["sobel", "echo", "to_uppercase", "topk"];

pub(crate) fn registration(index: u16, slots: &[&str]) -> Value {
    let slots: Vec<Value> = slots
        .iter()
        .enumerate()
        .map(|(i, a)| json!({"id": i, "accelerator": a, "hash": "", "busy_ratio": 0.0, "queue_depth": 0}))
        .collect();
    json!({
        "http": format!("10.0.0.{}:8080", index + 1),
        "rac": format!("10.0.0.{}:9400", index + 1),
        "opencl": format!("10.0.0.{}:9500", index + 1),
        "devices": [{"id": "cpu0", "backend": "cpu", "vendor": "netaccel", "platform": "host",
            "accelerators": CATALOG, "slots": slots}]
    })
}

/// A stand-in node renewing its lease with every registry in `registries` (followers
/// refuse; the leader, whichever it is, takes it).
pub(crate) fn fake_node(registries: &[&Registry], name: &str, body: Value) -> FakeNode {
    let targets: Vec<(String, String)> = registries
        .iter()
        .map(|r| (format!("{}/v1/nodes/{name}", r.base), r.auth.clone()))
        .collect();
    let renew = move |body: &Value| {
        for (url, auth) in &targets {
            let _ = ureq::put(url)
                .set("Authorization", auth)
                .send_json(body.clone());
        }
    };
    renew(&body);
    let body = Arc::new(Mutex::new(body));
    let stop = Arc::new(AtomicBool::new(false));
    let (stopping, current) = (stop.clone(), body.clone());
    let thread = std::thread::spawn(move || {
        while !stopping.load(Ordering::SeqCst) {
            let b = current.lock().unwrap().clone();
            renew(&b);
            std::thread::sleep(Duration::from_millis(400));
        }
    });
    FakeNode {
        body,
        stop,
        thread: Some(thread),
    }
}

pub(crate) fn deployment(name: &str, replicas: i32, annotations: Value) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1"}]}
            }
        }
    }))
    .unwrap()
}

pub(crate) async fn webhook_configured(plane: &ControlPlane) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(plane.client.clone());
    eventually("the webhook configuration", Duration::from_secs(30), || {
        let api = api.clone();
        async move { api.get_opt("netaccel").await.ok().flatten() }
    })
    .await;
}

pub(crate) fn env_of(pod: &Pod) -> Vec<(String, String)> {
    pod.spec.as_ref().unwrap().containers[0]
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

pub(crate) fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

pub(crate) fn slice_devices(slice: &ResourceSlice) -> Vec<(String, String)> {
    slice
        .spec
        .devices
        .iter()
        .flatten()
        .map(|d| {
            let accelerator = d.attributes.as_ref().unwrap()["accelerator"]
                .string
                .clone()
                .unwrap();
            (d.name.clone(), accelerator)
        })
        .collect()
}

/// The claim template `sobel`: one netaccel device holding sobel.
pub(crate) fn sobel_template() -> ResourceClaimTemplate {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "sobel"},
        "spec": {"spec": {"devices": {"requests": [{"name": "acc", "exactly": {
            "deviceClassName": "netaccel.io",
            "selectors": [{"cel": {"expression":
                "device.attributes[\"netaccel.io\"].accelerator == \"sobel\""}}]
        }}]}}}
    }))
    .unwrap()
}

/// A Deployment of one Pod with a claim from the template `sobel`.
pub(crate) fn claiming_deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "resourceClaims": [{"name": "acc", "resourceClaimTemplateName": "sobel"}],
                    "containers": [{"name": "app", "image": "example.invalid/app:1",
                        "resources": {"claims": [{"name": "acc"}]}}]
                }
            }
        }
    }))
    .unwrap()
}

/// The one live Pod labelled `app=<app>` once it is scheduled, not on `avoid`.
pub(crate) async fn scheduled_pod(pods: &Api<Pod>, app: &str, avoid: &[&str]) -> (Pod, String) {
    eventually(
        &format!("the Pod of {app} scheduled"),
        Duration::from_secs(60),
        || {
            let pods = pods.clone();
            let app = app.to_string();
            let avoid: Vec<String> = avoid.iter().map(|s| s.to_string()).collect();
            async move {
                let list = pods
                    .list(&ListParams::default().labels(&format!("app={app}")))
                    .await
                    .ok()?;
                let live: Vec<Pod> = list
                    .items
                    .into_iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .collect();
                let [pod] = live.as_slice() else { return None };
                let node = pod.spec.as_ref()?.node_name.clone()?;
                (!avoid.contains(&node)).then(|| (pod.clone(), node))
            }
        },
    )
    .await
}

/// The claim the resourceclaim controller made for `pod` from its template.
pub(crate) async fn claim_of(claims: &Api<ResourceClaim>, pod: &Pod) -> ResourceClaim {
    let name = eventually("the Pod's claim", Duration::from_secs(20), || {
        let status = pod.clone();
        let pods: Api<Pod> = Api::default_namespaced(claims.clone().into_client());
        async move {
            let fresh = pods.get(status.metadata.name.as_deref()?).await.ok()?;
            fresh.status?.resource_claim_statuses?[0]
                .resource_claim_name
                .clone()
        }
    })
    .await;
    claims.get(&name).await.unwrap()
}

/// `(id, node)` of the instances of `function`, sorted (none while it is unknown).
pub(crate) fn instance_nodes(registry: &Registry, function: &str) -> Vec<(String, String)> {
    let function: Value = ureq::get(&format!("{}/v1/functions/{function}", registry.base))
        .call()
        .ok()
        .and_then(|r| r.into_json().ok())
        .unwrap_or(Value::Null);
    let mut have: Vec<(String, String)> = function["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            (
                i["id"].as_str().unwrap_or_default().to_string(),
                i["node"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    have.sort();
    have
}

/// `(id, node, slot)` of the instances of `dra.<accelerator>`.
pub(crate) fn dra_instances(registry: &Registry, accelerator: &str) -> Vec<(String, String, u64)> {
    let Ok(response) =
        ureq::get(&format!("{}/v1/functions/dra.{accelerator}", registry.base)).call()
    else {
        return Vec::new();
    };
    let doc: Value = response.into_json().unwrap();
    doc["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["id"].as_str().unwrap().to_string(),
                i["node"].as_str().unwrap_or_default().to_string(),
                i["slot"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect()
}

/// The Pods of Deployment `app` once there are `n`, all scheduled, each on the node its
/// instance was bound on, none on `avoid`.
pub(crate) async fn settled(
    pods: &Api<Pod>,
    app: &str,
    n: usize,
    avoid: &[&str],
) -> Option<Vec<Pod>> {
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .ok()?;
    let live: Vec<Pod> = list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let ok = live.len() == n
        && live.iter().all(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
            node.is_some()
                && node == annotation(p, "netaccel.io/node")
                && !avoid.contains(&node.unwrap())
        });
    ok.then_some(live)
}

pub(crate) fn run(mut command: Command, what: &str) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}
