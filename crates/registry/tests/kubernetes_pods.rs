//! Pods that run: the control plane of `kubernetes.rs` plus a real kubelet and
//! containerd (`kubernetes/kubelet.rs`) on the bridge of the network-namespace harness.
//! A plain busybox Pod runs to completion and `kubectl logs` reads it. A Pod whose
//! ResourceClaimTemplate asks for a `sobel` slot, and two Pods joining a standalone
//! claim, get the slot's binding in their environment from netaccel's DRA kubelet
//! plugin (deploy/dra-kubelet-plugin) and call the slot over RAC and HTTP; the bytes
//! they print are the reference's. A Deployment bound by the admission webhook calls
//! from each of its 3 replicas. A netaccel node killed has its claim's Pod evicted and
//! stopped by the kubelet, and the replacement calls once the node is back; with two
//! kubelets (`kubernetes/node_move.rs`) the replacement moves to the other Kubernetes
//! node and calls its slot. A plugin restarted while its Pod runs loses no claim and
//! prepares none twice. Claims configured for a tenant (`kubernetes/tenants.rs`) give
//! their containers the tenant's credential, and a node that refuses anonymous callers
//! serves each tenant what its policy allows.
//!
//! Needs root, the binaries of `deploy/k8s-test/build.sh`, Debian's runc, CNI plugins
//! and busybox-static, and `netaccel-node` and `netaccel` built beside this crate's
//! binaries: without them the tests are skipped, and fail when `CI` is set.
//!
//! One node at a time (a lock): a control plane and a kubelet take most of a core
//! while they start.

#[path = "kubernetes/chart_plugin.rs"]
mod chart_plugin;
#[path = "kubernetes/displace.rs"]
mod displace;
#[allow(dead_code)]
#[path = "kubernetes/harness.rs"]
mod harness;
#[path = "kubernetes/kubelet.rs"]
mod kubelet;
#[path = "netns/mod.rs"]
mod netns;
#[path = "kubernetes/node_move.rs"]
mod node_move;
#[path = "kubernetes/pod_figures.rs"]
mod pod_figures;
#[path = "kubernetes/tenants.rs"]
mod tenants;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use harness::{eventually, ControlPlane};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use k8s_openapi::ByteString;
use kube::api::{Api, ListParams, PostParams};
use kubelet::{KubeletNode, CLIENT_IMAGE};
use node_move::claiming_deployment;
use serde_json::json;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The Kubernetes node, and the netaccel node of the same name.
const NODE: &str = "node-a";

/// What a test runs on. Fields drop in this order: the node first (it deletes the Pods
/// through the API server and waits for their containers), then the control plane,
/// then the network.
struct Cluster {
    node: KubeletNode,
    plane: ControlPlane,
    net: netns::Net,
}

/// Runs `test` with a control plane (no stand-in Nodes) and a kubelet node on the
/// bridge of a one-namespace netns harness, or skips.
fn with_node<F, Fut>(test: F)
where
    F: FnOnce(Cluster) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    with_node_within(Duration::from_secs(240), test)
}

/// [`with_node`], failing the test after `limit`.
fn with_node_within<F, Fut>(limit: Duration, test: F)
where
    F: FnOnce(Cluster) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !harness::available() || !kubelet::available() {
        return;
    }
    let Some(net) = netns::Net::or_skip(1) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let plane = ControlPlane::start_with_nodes(&[]).await;
        let node = KubeletNode::start(&plane, NODE, net.host_ip(), 0).await;
        let cluster = Cluster { node, plane, net };
        tokio::time::timeout(limit, test(cluster))
            .await
            .unwrap_or_else(|_| panic!("the test took over {limit:?}"));
    });
}

/// A Pod of the client image running `script` with `sh -c`, never restarted.
fn script_pod(name: &str, script: &str, extra: serde_json::Value) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": CLIENT_IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", script]}]
        }
    });
    merge(&mut pod["spec"], extra);
    serde_json::from_value(pod).unwrap()
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(into), serde_json::Value::Object(from)) = (into.as_object_mut(), from) {
        for (k, v) in from {
            match (into.get_mut(&k), &v) {
                (Some(existing @ serde_json::Value::Object(_)), serde_json::Value::Object(_)) => {
                    merge(existing, v)
                }
                (Some(serde_json::Value::Array(a)), serde_json::Value::Array(b)) => {
                    for (x, y) in a.iter_mut().zip(b) {
                        merge(x, y.clone());
                    }
                }
                _ => {
                    into.insert(k, v);
                }
            }
        }
    }
}

/// Waits until Pod `name` has run to completion (phase Succeeded); a Pod that failed
/// fails the test with its logs and the node's.
async fn completed(plane: &ControlPlane, node: &mut KubeletNode, name: &str) -> Pod {
    let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let pod = pods.get(name).await.unwrap();
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if phase == "Succeeded" {
            return pod;
        }
        node.check_alive();
        assert!(
            phase != "Failed" && Instant::now() < deadline,
            "Pod {name} is {phase:?}: {}\nlogs: {}\n{}",
            serde_json::to_string(&pod.status).unwrap(),
            logs(plane, name),
            node.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `kubectl logs POD` (the API server asks the kubelet).
fn logs(plane: &ControlPlane, pod: &str) -> String {
    let out = plane.kubectl().args(["logs", pod]).output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_busybox_pod_runs_to_completion_and_kubectl_logs_reads_it() {
    with_node(|mut c| async move {
        let Cluster { node, plane, net } = &mut c;
        let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
        let started = Instant::now();
        let pod = script_pod(
            "hello",
            "echo \"hello from $(hostname)\"; ip -4 -o addr show eth0 | awk '{print $4}'",
            json!({}),
        );
        pods.create(&PostParams::default(), &pod).await.unwrap();
        let pod = completed(plane, node, "hello").await;
        eprintln!(
            "busybox Pod created → Succeeded in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        // The scheduler put it on the kubelet's node; the CNI gave it an address of
        // the bridge's /24, at .100 or above.
        assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some(NODE));
        let [a, b, c, _] = net.host_ip().octets();
        let text = logs(plane, "hello");
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("hello from hello"), "{text}");
        let address = lines.next().unwrap_or_default();
        let host: u8 = address
            .strip_prefix(&format!("{a}.{b}.{c}."))
            .and_then(|r| r.strip_suffix("/24"))
            .and_then(|h| h.parse().ok())
            .unwrap_or_else(|| panic!("Pod address {address:?} not in the bridge's /24"));
        assert!((100..=200).contains(&host), "{address}");
    });
}

/// The image the sobel Pods read (from a ConfigMap) and its shape.
const WIDTH: usize = 16;
const HEIGHT: usize = 12;

fn test_image() -> Vec<u8> {
    (0..WIDTH * HEIGHT)
        .map(|i| ((i * 37 + (i / WIDTH) * 91) % 256) as u8)
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What each sobel Pod runs: the injected binding, then the slot called over HTTP
/// (`NETACCEL_NODE`, which the CLI reads) and over RAC (`NETACCEL_RAC`), each output
/// printed as one line of hex.
fn sobel_script() -> String {
    let call = format!("-p width={WIDTH} -p height={HEIGHT} -i /in/image.raw");
    format!(
        "set -e; echo \"node=$NETACCEL_NODE rac=$NETACCEL_RAC slot=$NETACCEL_SLOT instance=$NETACCEL_INSTANCE\"; \
         netaccel call sobel {call} | od -An -v -tx1 | tr -d ' \\n'; echo; \
         netaccel call sobel --rac \"$NETACCEL_RAC\" {call} | od -An -v -tx1 | tr -d ' \\n'; echo"
    )
}

/// A Pod with a claim of the template `sobel` running [`sobel_script`] on the image of
/// the ConfigMap `image`.
fn sobel_claim_pod(name: &str) -> Pod {
    script_pod(
        name,
        &sobel_script(),
        json!({
            "resourceClaims": [{"name": "acc", "resourceClaimTemplateName": "sobel"}],
            "volumes": [{"name": "in", "configMap": {"name": "image"}}],
            "containers": [{"resources": {"claims": [{"name": "acc"}]},
                "volumeMounts": [{"name": "in", "mountPath": "/in"}]}]
        }),
    )
}

/// The instances the registry holds of `dra.<accelerator>`: (id, node, slot).
fn dra_instances(registry: &netns::Registry, accelerator: &str) -> Vec<(String, String, u64)> {
    let (status, doc) = registry.call("GET", &format!("/v1/functions/dra.{accelerator}"), None);
    if status != 200 {
        return Vec::new();
    }
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

#[test]
fn a_pod_with_a_sobel_claim_gets_its_binding_from_the_dra_plugin_and_calls_its_slot() {
    with_node(|mut c| async move {
        let Cluster { node, plane, net } = &mut c;
        let (registry, _netaccel) = dra_setup(plane, net, node).await;
        let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
        let started = Instant::now();
        let pod = sobel_claim_pod("edges");
        pods.create(&PostParams::default(), &pod).await.unwrap();
        // The claim made from the template, allocated by the scheduler (it lives at
        // least as long as the Pod runs).
        let claims: Api<ResourceClaim> = Api::default_namespaced(plane.client.clone());
        let uid = eventually("the Pod's claim allocated", Duration::from_secs(30), || {
            let claims = claims.clone();
            async move {
                let list = claims.list(&ListParams::default()).await.ok()?;
                let claim = list.items.into_iter().next()?;
                claim.status.as_ref()?.allocation.as_ref()?;
                claim.metadata.uid
            }
        })
        .await;
        completed(plane, node, "edges").await;
        eprintln!(
            "sobel Pod created → called its slot → Succeeded in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let instance = format!("dra-{uid}-0");
        let net_ip = net.ns_ip(0);
        let text = logs(plane, "edges");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(
            lines[0],
            format!(
                "node=http://{net_ip}:{http} rac={net_ip}:{rac} slot=0 instance={instance}",
                http = netns::NODE_HTTP_PORT,
                rac = netns::NODE_RAC_PORT
            )
        );
        let want = hex(&accel::reference::sobel(&test_image(), WIDTH, HEIGHT));
        assert_eq!(lines[1], want, "over HTTP");
        assert_eq!(lines[2], want, "over RAC");

        // The Pod ended: the kubelet unprepared its claim (spec and checkpoint entry
        // gone); deleting the Pod deletes its claim, and the registry releases the
        // claim's instance.
        eventually("the claim unprepared", Duration::from_secs(30), || {
            let specs = node.cdi_specs();
            let ckpt = node.dra_checkpoint();
            async move {
                let empty = ckpt.is_some_and(|c| c["claims"].as_object().unwrap().is_empty());
                (specs.is_empty() && empty).then_some(())
            }
        })
        .await;
        pods.delete("edges", &Default::default()).await.unwrap();
        eventually(
            "the claim's instance released",
            Duration::from_secs(30),
            || {
                let left = dra_instances(&registry, "sobel");
                async move { left.is_empty().then_some(()) }
            },
        )
        .await;

        standalone_claim_joined_by_two_pods(plane, node, &want).await;
    });
}

/// A standalone claim joined by two Pods at once: both get the binding (the claim
/// prepared once: the plugin's second prepare of the test), both calls are right; the
/// claim is unprepared when the last has ended.
async fn standalone_claim_joined_by_two_pods(
    plane: &ControlPlane,
    node: &mut KubeletNode,
    want: &str,
) {
    let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
    let claims: Api<ResourceClaim> = Api::default_namespaced(plane.client.clone());
    let shared: ResourceClaim = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "shared"},
        "spec": sobel_template().spec.spec
    }))
    .unwrap();
    claims
        .create(&PostParams::default(), &shared)
        .await
        .unwrap();
    let joining = json!({
        "resourceClaims": [{"name": "acc", "resourceClaimName": "shared"}],
        "volumes": [{"name": "in", "configMap": {"name": "image"}}],
        "containers": [{"resources": {"claims": [{"name": "acc"}]},
            "volumeMounts": [{"name": "in", "mountPath": "/in"}]}]
    });
    for name in ["joiner-1", "joiner-2"] {
        let pod = script_pod(name, &sobel_script(), joining.clone());
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let shared_uid = eventually(
        "the shared claim allocated",
        Duration::from_secs(30),
        || {
            let claims = claims.clone();
            async move {
                let claim = claims.get("shared").await.ok()?;
                claim.status.as_ref()?.allocation.as_ref()?;
                claim.metadata.uid
            }
        },
    )
    .await;
    for name in ["joiner-1", "joiner-2"] {
        completed(plane, node, name).await;
        let text = logs(plane, name);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{name}: {text}");
        assert!(
            lines[0].ends_with(&format!("instance=dra-{shared_uid}-0")),
            "{name}: {text}"
        );
        assert_eq!(lines[1], want, "{name} over HTTP");
        assert_eq!(lines[2], want, "{name} over RAC");
    }
    let prepared = node.dra_plugin_log().matches("\"prepared\"").count();
    assert_eq!(
        prepared, 2,
        "one prepare per claim (the template's, the shared one)"
    );
    eventually(
        "the shared claim unprepared",
        Duration::from_secs(30),
        || {
            let specs = node.cdi_specs();
            async move { specs.is_empty().then_some(()) }
        },
    )
    .await;
}

#[test]
fn a_restarted_dra_plugin_keeps_its_prepared_claims_and_unprepares_them() {
    with_node(|mut c| async move {
        let Cluster { node, plane, net } = &mut c;
        let (registry, netaccel) = dra_setup(plane, net, node).await;
        let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
        let pod = script_pod(
            "sleeper",
            "echo \"$NETACCEL_INSTANCE\"; exec sleep 3600",
            json!({
                "resourceClaims": [{"name": "acc", "resourceClaimTemplateName": "sobel"}],
                "containers": [{"resources": {"claims": [{"name": "acc"}]}}]
            }),
        );
        pods.create(&PostParams::default(), &pod).await.unwrap();
        eventually("the Pod running", Duration::from_secs(60), || {
            let pods = pods.clone();
            async move {
                let pod = pods.get("sleeper").await.ok()?;
                (pod.status?.phase? == "Running").then_some(())
            }
        })
        .await;
        let prepared = node.dra_checkpoint().expect("a checkpoint");
        let claims = prepared["claims"].as_object().unwrap().clone();
        assert_eq!(claims.len(), 1, "{prepared}");
        let specs = node.cdi_specs();
        assert_eq!(specs.len(), 1);
        let spec_path = node.dir.join("cdi").join(&specs[0]);
        let spec = std::fs::read_to_string(&spec_path).unwrap();

        // SIGKILL and start again while the Pod runs: the claim is still known, its
        // spec untouched, nothing prepared anew, the container not restarted.
        node.restart_dra_plugin(&registry.base).await;
        assert_eq!(node.dra_checkpoint().unwrap(), prepared);
        assert_eq!(std::fs::read_to_string(&spec_path).unwrap(), spec);
        let pod = pods.get("sleeper").await.unwrap();
        let status = pod.status.unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.container_statuses.unwrap()[0].restart_count, 0);
        let uid = claims.keys().next().unwrap().clone();
        assert_eq!(logs(plane, "sleeper").trim(), format!("dra-{uid}-0"));

        // Loading another accelerator into the claim's slot is refused while the claim
        // holds it (the node asks the registry first), and the Pod runs on.
        let refused = ureq::put(&format!("http://{}/v1/slots/0", netaccel.http))
            .set("Authorization", &format!("Bearer {}", netns::NODE_TOKEN))
            .send_json(json!({"accelerator": "echo"}));
        match refused {
            Err(ureq::Error::Status(409, response)) => {
                let text = response.into_string().unwrap();
                assert!(text.contains("ResourceClaim"), "{text}");
            }
            other => panic!("reconfiguring the claim's slot: {other:?}"),
        }
        let pod = pods.get("sleeper").await.unwrap();
        assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Running"));

        // The Pod deleted: the restarted plugin unprepares the claim it did not
        // prepare itself, and the registry releases the instance.
        pods.delete("sleeper", &Default::default()).await.unwrap();
        eventually("the claim unprepared", Duration::from_secs(30), || {
            let specs = node.cdi_specs();
            let ckpt = node.dra_checkpoint();
            async move {
                let empty = ckpt.is_some_and(|c| c["claims"].as_object().unwrap().is_empty());
                (specs.is_empty() && empty).then_some(())
            }
        })
        .await;
        let log = node.dra_plugin_log();
        assert!(log.contains("\"unprepared\""), "{log}");
        assert!(!log.contains("\"prepared\""), "prepared twice:\n{log}");
        eventually(
            "the claim's instance released",
            Duration::from_secs(30),
            || {
                let left = dra_instances(&registry, "sobel");
                async move { left.is_empty().then_some(()) }
            },
        )
        .await;
    });
}

#[test]
fn a_deployment_of_three_replicas_bound_by_the_webhook_calls_its_slots() {
    with_node(|mut c| async move {
        let Cluster { node, plane, net } = &mut c;
        let (registry, _netaccel) = dra_setup(plane, net, node).await;
        // The webhook's environment names the node's addresses (NETACCEL_NODE_HTTP,
        // NETACCEL_NODE_RAC); the CLI is given them.
        let call = format!("-p width={WIDTH} -p height={HEIGHT} -i /in/image.raw");
        let script = format!(
            "set -e; echo \"$NETACCEL_INSTANCE\"; \
             netaccel --node \"$NETACCEL_NODE_HTTP\" call sobel {call} | od -An -v -tx1 | tr -d ' \\n'; echo; \
             netaccel call sobel --rac \"$NETACCEL_NODE_RAC\" {call} | od -An -v -tx1 | tr -d ' \\n'; echo; \
             exec sleep 3600"
        );
        let template = script_pod(
            "unused",
            &script,
            json!({
                "volumes": [{"name": "in", "configMap": {"name": "image"}}],
                "containers": [{"volumeMounts": [{"name": "in", "mountPath": "/in"}]}]
            }),
        );
        let mut spec = serde_json::to_value(template.spec.unwrap()).unwrap();
        spec["restartPolicy"] = json!("Always");
        let deployment: Deployment = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "edges"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "edges"}},
                "template": {
                    "metadata": {"labels": {"app": "edges"},
                        "annotations": {"netaccel.io/accelerator": "sobel"}},
                    "spec": spec
                }
            }
        }))
        .unwrap();
        let started = Instant::now();
        let deployments: Api<Deployment> = Api::default_namespaced(plane.client.clone());
        deployments
            .create(&PostParams::default(), &deployment)
            .await
            .unwrap();
        let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
        let want = hex(&accel::reference::sobel(&test_image(), WIDTH, HEIGHT));
        let names = eventually("3 replicas running", Duration::from_secs(90), || {
            let pods = pods.clone();
            async move {
                let list = pods
                    .list(&ListParams::default().labels("app=edges"))
                    .await
                    .ok()?;
                let running: Vec<String> = list
                    .items
                    .into_iter()
                    .filter(|p| {
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                    .filter_map(|p| p.metadata.name)
                    .collect();
                (running.len() == 3).then_some(running)
            }
        })
        .await;
        let mut instances = Vec::new();
        for name in &names {
            let text = eventually("the replica's two calls", Duration::from_secs(30), || {
                let text = logs(plane, name);
                async move { (text.lines().count() == 3).then_some(text) }
            })
            .await;
            let lines: Vec<&str> = text.lines().collect();
            assert!(lines[0].starts_with("k8s-"), "{text}");
            assert_eq!(lines[1], want, "{name} over HTTP");
            assert_eq!(lines[2], want, "{name} over RAC");
            instances.push(lines[0].to_string());
        }
        eprintln!(
            "3 webhook-bound replicas created → all called their slot in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        instances.sort();
        instances.dedup();
        assert_eq!(instances.len(), 3, "one instance per replica");

        // A bare Pod calling in a loop, deleted mid-call: the kubelet stops it, and
        // its instance (function = the Pod's name) is released, none leaked.
        let looping = format!(
            "while true; do netaccel --node \"$NETACCEL_NODE_HTTP\" call sobel {call} > /dev/null && echo called; done"
        );
        let mut pod = serde_json::to_value(script_pod(
            "looper",
            &looping,
            json!({
                "volumes": [{"name": "in", "configMap": {"name": "image"}}],
                "containers": [{"volumeMounts": [{"name": "in", "mountPath": "/in"}]}]
            }),
        ))
        .unwrap();
        pod["metadata"]["annotations"] = json!({"netaccel.io/accelerator": "sobel"});
        let pod: Pod = serde_json::from_value(pod).unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        eventually("the looping Pod calling", Duration::from_secs(60), || {
            let text = logs(plane, "looper");
            async move { (text.lines().filter(|l| *l == "called").count() >= 3).then_some(()) }
        })
        .await;
        let bound = |registry: &netns::Registry| {
            let (status, doc) = registry.call("GET", "/v1/functions/looper", None);
            assert_eq!(status, 200, "{doc}");
            doc["instances"].as_array().unwrap().len()
        };
        assert_eq!(bound(&registry), 1);
        pods.delete("looper", &Default::default()).await.unwrap();
        eventually("the deleted Pod gone and its instance released", Duration::from_secs(30), || {
            let pods = pods.clone();
            let left = bound(&registry);
            async move { (pods.get_opt("looper").await.ok()?.is_none() && left == 0).then_some(()) }
        })
        .await;
    });
}

#[test]
fn a_killed_netaccel_node_has_its_claims_pod_evicted_by_the_kubelet_and_replaced() {
    with_node(|mut c| async move {
        let Cluster { node, plane, net } = &mut c;
        let (registry, netaccel) = dra_setup(plane, net, node).await;
        let (pods, want, (first_pod, first_instance)) = deploy_calling(plane).await;

        // kill -9 of the netaccel node. The registry loses it after one lease, unbinds
        // the claim's instance and evicts the Pod; the kubelet stops it (grace period
        // 1 s) and the Pod is gone — nobody force-deletes it here.
        let mut netaccel = netaccel;
        let killed = Instant::now();
        netaccel.proc.kill();
        drop(netaccel);
        gone(&pods, &first_pod).await;
        let gone = killed.elapsed();
        // The node comes back (as its DaemonSet would restart it): the replacement Pod's
        // new claim is allocated on its slot again, prepared, and the Pod calls.
        let _netaccel = netns::Node::start(net, 0, NODE, &registry.base, &["sobel"], "");
        let (second_pod, second_instance) = called(plane, &pods, Some(&first_pod), &want).await;
        let first_good_call = killed.elapsed();
        assert_ne!(second_pod, first_pod);
        assert_ne!(second_instance, first_instance, "a new allocation");
        eprintln!(
            "node loss: kill -9 → Pod evicted and gone {:.1} s → node back, replacement's first good call {:.1} s",
            gone.as_secs_f64(),
            first_good_call.as_secs_f64()
        );
        eventually(
            "only the new claim's instance",
            Duration::from_secs(30),
            || {
                let ids: Vec<String> = dra_instances(&registry, "sobel")
                    .into_iter()
                    .map(|i| i.0)
                    .collect();
                let want = vec![second_instance.clone()];
                async move { (ids == want).then_some(()) }
            },
        )
        .await;
    });
}

/// Creates the Deployment of [`claiming_deployment`] running [`calling_script`] and
/// waits for its first replica's good call: the Pods' API, the output a call must
/// print, and that replica's Pod and instance.
async fn deploy_calling(plane: &ControlPlane) -> (Api<Pod>, String, (String, String)) {
    let deployments: Api<Deployment> = Api::default_namespaced(plane.client.clone());
    deployments
        .create(
            &PostParams::default(),
            &claiming_deployment(&calling_script()),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
    let want = hex(&accel::reference::sobel(&test_image(), WIDTH, HEIGHT));
    let first = called(plane, &pods, None, &want).await;
    (pods, want, first)
}

/// Waits (up to 60 s) until Pod `name` is gone: evicted and stopped by its kubelet,
/// with nobody force-deleting it.
async fn gone(pods: &Api<Pod>, name: &str) {
    eventually(
        &format!("{name} evicted and stopped by its kubelet"),
        Duration::from_secs(60),
        || {
            let pods = pods.clone();
            let name = name.to_string();
            async move { pods.get_opt(&name).await.ok()?.is_none().then_some(()) }
        },
    )
    .await;
}

/// What a replica of [`claiming_deployment`] runs for [`called`]: prints its instance and
/// the output of one sobel call of the test image, then sleeps.
fn calling_script() -> String {
    let call = format!("-p width={WIDTH} -p height={HEIGHT} -i /in/image.raw");
    format!(
        "set -e; echo \"$NETACCEL_INSTANCE\"; \
         netaccel call sobel {call} | od -An -v -tx1 | tr -d ' \\n'; echo; exec sleep 3600"
    )
}

/// Waits until a Running Pod of `app=edges` other than `not` has printed its instance and
/// a call's output, which must be `want`: (Pod name, instance).
async fn called(
    plane: &ControlPlane,
    pods: &Api<Pod>,
    not: Option<&str>,
    want: &str,
) -> (String, String) {
    let (name, text) = eventually("a replica's good call", Duration::from_secs(90), || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("app=edges"))
                .await
                .ok()?;
            let pod = list.items.into_iter().find(|p| {
                p.metadata.name.as_deref() != not
                    && p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })?;
            let name = pod.metadata.name?;
            let text = logs(plane, &name);
            (text.lines().count() == 2).then_some((name, text))
        }
    })
    .await;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[1], want, "{name}: {text}");
    (name, lines[0].to_string())
}

/// The registry (serving Kubernetes, its admission webhook configured and written, a
/// node lost 1.5 s after its last renewal), a netaccel node with a sobel slot in
/// namespace 0 named after the kubelet's node (its slice's nodeName is that node), the
/// DRA plugin registered, the ConfigMap `image` holding [`test_image`] and the claim
/// template `sobel`.
async fn dra_setup(
    plane: &ControlPlane,
    net: &netns::Net,
    node: &mut KubeletNode,
) -> (netns::Registry, netns::Node) {
    dra_setup_with(plane, net, node, &["sobel"], "1500").await
}

/// [`dra_setup`] with these slots on the netaccel node and this node lease.
async fn dra_setup_with(
    plane: &ControlPlane,
    net: &netns::Net,
    node: &mut KubeletNode,
    slots: &[&str],
    lease_ms: &str,
) -> (netns::Registry, netns::Node) {
    dra_setup_configured(plane, net, node, slots, lease_ms, "").await
}

/// [`dra_setup_with`], with `extra` lines in the netaccel node's node.toml.
async fn dra_setup_configured(
    plane: &ControlPlane,
    net: &netns::Net,
    node: &mut KubeletNode,
    slots: &[&str],
    lease_ms: &str,
    extra: &str,
) -> (netns::Registry, netns::Node) {
    let registry = start_registry(plane, net, lease_ms).await;
    // The netaccel node in namespace 0 has the Kubernetes node's name: its slice's
    // nodeName is the kubelet's node.
    let netaccel = netns::Node::start(net, 0, NODE, &registry.base, slots, extra);
    registry.wait_ready(&[NODE], Duration::from_secs(20));
    slice_published(plane, NODE, slots.len()).await;
    node.start_dra_plugin(&registry.base).await;
    create_image_and_template(plane).await;
    (registry, netaccel)
}

/// The registry serving Kubernetes (its admission webhook configured and written, a
/// node lost `lease_ms` after its last renewal), on the bridge.
async fn start_registry(plane: &ControlPlane, net: &netns::Net, lease_ms: &str) -> netns::Registry {
    let kubeconfig = plane.kubeconfig.display().to_string();
    let webhook = format!("{}:{}", net.host_ip(), net.host_port());
    let url = format!("https://{webhook}/v1/admission/pods");
    let host = net.host_ip().to_string();
    let registry = netns::Registry::start(
        net,
        &[
            "--kubernetes",
            "--kubeconfig",
            &kubeconfig,
            "--webhook",
            &webhook,
            "--webhook-configuration",
            "netaccel",
            "--webhook-url",
            &url,
            "--webhook-host",
            &host,
            "--lease-ms",
            lease_ms,
        ],
    );
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(plane.client.clone());
    eventually("the webhook configuration", Duration::from_secs(30), || {
        let webhooks = webhooks.clone();
        async move { webhooks.get_opt("netaccel").await.ok()?.map(|_| ()) }
    })
    .await;
    registry
}

/// Waits until the registry has published node `name`'s ResourceSlice with its `slots`
/// devices. A Pod whose claim the scheduler cannot allocate yet waits for the
/// scheduler's retry (up to 10 s of backoff), which would be counted as the Pod's start.
async fn slice_published(plane: &ControlPlane, name: &str, slots: usize) {
    let slices: Api<ResourceSlice> = Api::all(plane.client.clone());
    let slice = format!("netaccel-{name}");
    eventually(
        &format!("{slice} published"),
        Duration::from_secs(30),
        || {
            let slices = slices.clone();
            let slice = slice.clone();
            async move {
                let devices = slices.get_opt(&slice).await.ok()??.spec.devices?;
                (devices.len() == slots).then_some(())
            }
        },
    )
    .await;
}

/// The ConfigMap `image` holding [`test_image`] and the claim template `sobel`.
async fn create_image_and_template(plane: &ControlPlane) {
    let configmaps: Api<ConfigMap> = Api::default_namespaced(plane.client.clone());
    let image = test_image();
    let data = BTreeMap::from([("image.raw".to_string(), ByteString(image.clone()))]);
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("image".into()),
            ..Default::default()
        },
        binary_data: Some(data),
        ..Default::default()
    };
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let templates: Api<ResourceClaimTemplate> = Api::default_namespaced(plane.client.clone());
    templates
        .create(&PostParams::default(), &sobel_template())
        .await
        .unwrap();
}

fn sobel_template() -> ResourceClaimTemplate {
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
