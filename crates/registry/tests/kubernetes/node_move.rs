//! A Pod that moves to another Kubernetes node: two kubelets (`node-a`, `node-b`), each
//! with its own containerd, DRA plugin and netaccel node of its name (namespaces 0 and
//! 1), share the bridge. A Deployment's Pod with a claim runs on one of them; that
//! node's netaccel node is killed (`kill -9`). The registry loses it after one lease,
//! deletes its slice, unbinds the claim's instance and evicts the Pod; that node's
//! kubelet stops it; the ReplicaSet's replacement gets a new claim, which the scheduler
//! can only allocate from the other node's slice, so it runs there, prepared by that
//! node's plugin, and calls that node's slot.
//!
//! The replacement is the Deployment's, as with any user's controller: a bare Pod
//! evicted is gone for good. The Kubernetes node of the lost netaccel node stays Ready
//! (only the daemon died), so nothing but the missing slice moves the Pod.

use super::*;

/// The two nodes, and which netaccel namespace each one's netaccel node runs in.
const NODES: [&str; 2] = ["node-a", "node-b"];

/// What [`with_two_nodes`] gives a test; fields drop in this order (nodes first: they
/// delete the Pods and wait for their containers).
struct TwoNodes {
    nodes: [KubeletNode; 2],
    plane: ControlPlane,
    net: netns::Net,
}

/// Runs `test` on a control plane and two kubelet nodes on one bridge, or skips.
fn with_two_nodes<F, Fut>(test: F)
where
    F: FnOnce(TwoNodes) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !harness::available() || !kubelet::available() {
        return;
    }
    let Some(net) = netns::Net::or_skip(2) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let plane = ControlPlane::start_with_nodes(&[]).await;
        let a = KubeletNode::start(&plane, NODES[0], net.host_ip(), 0).await;
        let b = KubeletNode::start(&plane, NODES[1], net.host_ip(), 1).await;
        let cluster = TwoNodes {
            nodes: [a, b],
            plane,
            net,
        };
        let limit = Duration::from_secs(240);
        tokio::time::timeout(limit, test(cluster))
            .await
            .unwrap_or_else(|_| panic!("the test took over {limit:?}"));
    });
}

/// A replica that has called: its Pod, Kubernetes node, the first line it printed
/// (instance and node address), and the host's uptime at its good call.
struct Called {
    pod: String,
    node: String,
    binding: String,
    at: f64,
}

/// Waits until a Running Pod of `app=edges` other than `not` has printed its binding,
/// a call's output (which must be `want`) and the uptime after it.
async fn replica_called(plane: &ControlPlane, not: Option<&str>, want: &str) -> Called {
    let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
    let (pod, node, text) = eventually("a replica's good call", Duration::from_secs(90), || {
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
            let node = pod.spec?.node_name?;
            let name = pod.metadata.name?;
            let text = logs(plane, &name);
            (text.lines().count() == 3).then_some((name, node, text))
        }
    })
    .await;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[1], want, "{pod}: {text}");
    let at = lines[2]
        .strip_prefix("ok ")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{pod}: {text}"));
    Called {
        pod,
        node,
        binding: lines[0].to_string(),
        at,
    }
}

#[test]
fn a_pod_whose_netaccel_node_is_lost_moves_to_another_kubernetes_node() {
    with_two_nodes(|mut c| async move {
        let TwoNodes { nodes, plane, net } = &mut c;
        let registry = start_registry(plane, net, "1500").await;
        let mut netaccel: Vec<Option<netns::Node>> = NODES
            .iter()
            .enumerate()
            .map(|(i, name)| {
                Some(netns::Node::start(
                    net,
                    i,
                    name,
                    &registry.base,
                    &["sobel"],
                    "",
                ))
            })
            .collect();
        registry.wait_ready(&NODES, Duration::from_secs(20));
        for name in NODES {
            slice_published(plane, name, 1).await;
        }
        for node in nodes.iter_mut() {
            node.start_dra_plugin(&registry.base).await;
        }
        create_image_and_template(plane).await;

        let call = format!("-p width={WIDTH} -p height={HEIGHT} -i /in/image.raw");
        let script = format!(
            "set -e; echo \"$NETACCEL_INSTANCE $NETACCEL_NODE\"; \
             netaccel call sobel {call} | od -An -v -tx1 | tr -d ' \\n'; echo; \
             echo \"ok $(cut -d' ' -f1 /proc/uptime)\"; exec sleep 3600"
        );
        let deployments: Api<Deployment> = Api::default_namespaced(plane.client.clone());
        deployments
            .create(&PostParams::default(), &claiming_deployment(&script))
            .await
            .unwrap();
        let want = hex(&accel::reference::sobel(&test_image(), WIDTH, HEIGHT));
        let first = replica_called(plane, None, &want).await;
        let lost = NODES.iter().position(|n| *n == first.node).unwrap();
        let other = 1 - lost;
        let address = |i: usize| format!("http://{}:{}", net.ns_ip(i), netns::NODE_HTTP_PORT);
        assert!(first.binding.ends_with(&address(lost)), "{}", first.binding);

        // kill -9 of the netaccel node serving the claim; its Kubernetes node stays.
        let killed = pod_figures::uptime();
        netaccel[lost].take().unwrap().proc.kill();
        let moved = replica_called(plane, Some(&first.pod), &want).await;
        assert_eq!(
            moved.node, NODES[other],
            "the replacement on the other node"
        );
        assert!(
            moved.binding.ends_with(&address(other)),
            "{}",
            moved.binding
        );
        let (instance, _) = moved.binding.split_once(' ').unwrap();
        let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
        gone(&pods, &first.pod).await;
        let gone = pod_figures::uptime() - killed;
        eprintln!(
            "node loss across nodes: kill -9 of {}'s netaccel node → replacement's first good call on {} {:.1} s (first Pod gone after ≤ {gone:.1} s)",
            NODES[lost],
            NODES[other],
            moved.at - killed
        );
        let want = vec![(instance.to_string(), NODES[other].to_string(), 0)];
        let last = std::cell::RefCell::new(Vec::new());
        let settled = tokio::time::timeout(Duration::from_secs(30), async {
            while *last.borrow() != want {
                tokio::time::sleep(Duration::from_millis(100)).await;
                *last.borrow_mut() = dra_instances(&registry, "sobel");
            }
        })
        .await;
        assert!(
            settled.is_ok(),
            "only the new claim's instance ({want:?}), on the other node, within 30 s; the registry holds {:?}",
            last.borrow()
        );
    });
}

/// A Deployment `edges` of one replica running `script`, with a claim from the template
/// `sobel` and the test image mounted at /in.
pub(crate) fn claiming_deployment(script: &str) -> Deployment {
    let template = script_pod(
        "unused",
        script,
        json!({
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "acc", "resourceClaimTemplateName": "sobel"}],
            "volumes": [{"name": "in", "configMap": {"name": "image"}}],
            "containers": [{"resources": {"claims": [{"name": "acc"}]},
                "volumeMounts": [{"name": "in", "mountPath": "/in"}]}]
        }),
    );
    let mut spec = serde_json::to_value(template.spec.unwrap()).unwrap();
    spec["restartPolicy"] = json!("Always");
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "edges"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "edges"}},
            "template": {"metadata": {"labels": {"app": "edges"}}, "spec": spec}}
    }))
    .unwrap()
}
