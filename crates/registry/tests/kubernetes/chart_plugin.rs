//! The Helm chart's DRA plugin DaemonSet on the real kubelet: the plugin image (the
//! static binary alone, as its Dockerfile makes it) imported into containerd, the
//! chart's ServiceAccount, RBAC and DaemonSet rendered by `helm template` and applied;
//! the plugin's Pod registers with the kubelet through the host paths the chart mounts
//! and talks to the API server as the chart's ServiceAccount (a token of it in a
//! kubeconfig Secret: the test cluster has no Service network to the API server). No
//! plugin runs beside the kubelet here: a sobel Pod's claim is prepared by the
//! DaemonSet's Pod, the Pod calls its slot, and its claim is unprepared when it ends.

use super::*;

use k8s_openapi::api::core::v1::Secret;
use std::process::Command;

/// `helm template` of the chart's DRA plugin objects for this node.
fn render_plugin(plane: &ControlPlane, node: &KubeletNode, registry: &str, health: u16) -> String {
    let chart = repo_root().join("deploy/helm/netaccel");
    let mut helm = Command::new(harness::helm());
    helm.env("HELM_CACHE_HOME", plane.dir.join("helm-cache"))
        .env("HELM_CONFIG_HOME", plane.dir.join("helm-config"))
        .env("HELM_DATA_HOME", plane.dir.join("helm-data"))
        .args(["template", "netaccel"])
        .arg(&chart)
        .args(["--namespace", "default", "--kube-version", "1.34.2"])
        .args(["--show-only", "templates/dra-plugin.yaml"]);
    for set in [
        "draPlugin.enabled=true".to_string(),
        format!("draPlugin.image.repository={PLUGIN_IMAGE_REPO}"),
        "draPlugin.image.tag=test".to_string(),
        "draPlugin.image.pullPolicy=Never".to_string(),
        format!(
            "draPlugin.kubeletDir={}",
            node.dir.join("kubelet").display()
        ),
        format!("draPlugin.cdiDir={}", node.dir.join("cdi").display()),
        format!("draPlugin.registry={registry}"),
        "draPlugin.kubeconfigSecret=netaccel-dra-plugin-kubeconfig".to_string(),
        "draPlugin.hostNetwork=true".to_string(),
        format!("draPlugin.healthPort={health}"),
    ] {
        helm.args(["--set", &set]);
    }
    helm.args([
        "--set-json",
        r#"draPlugin.nodeSelector={"kubernetes.io/os":"linux"}"#,
    ]);
    let out = helm.output().expect("running helm");
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A registry-qualified name: the CRI names an unqualified one docker.io/library/….
const PLUGIN_IMAGE_REPO: &str = "netaccel.io/dra-plugin";

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Runs kubectl with `args` (and `stdin`), failing the test with its error output.
fn kubectl(plane: &ControlPlane, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut cmd = plane.kubectl();
    cmd.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("running kubectl");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.unwrap_or("").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The plane's kubeconfig with `token` in place of the admin's.
fn kubeconfig_with_token(plane: &ControlPlane, token: &str) -> String {
    let admin = std::fs::read_to_string(&plane.kubeconfig).unwrap();
    let lines: Vec<String> = admin
        .lines()
        .map(|l| match l.trim_start().strip_prefix("token: ") {
            Some(_) => format!("    token: {token}"),
            None => l.to_string(),
        })
        .collect();
    assert!(lines.iter().any(|l| l.ends_with(token)), "{admin}");
    lines.join("\n") + "\n"
}

#[test]
fn the_charts_dra_plugin_daemonset_runs_on_the_kubelet_and_prepares_a_claim() {
    with_node(|mut c| async move {
        let Cluster { node, plane, net } = &mut c;
        let registry = start_registry(plane, net, "1500").await;
        let _netaccel = netns::Node::start(net, 0, NODE, &registry.base, &["sobel"], "");
        registry.wait_ready(&[NODE], Duration::from_secs(20));
        slice_published(plane, NODE, 1).await;
        create_image_and_template(plane).await;

        node.import_dra_plugin_image(&format!("{PLUGIN_IMAGE_REPO}:test"));
        let health = harness::free_port();
        let rendered = render_plugin(plane, node, &registry.base, health);
        kubectl(
            plane,
            &["apply", "-n", "default", "-f", "-"],
            Some(&rendered),
        );
        // The chart's ServiceAccount is who the plugin is: its RBAC is the chart's.
        let token = kubectl(
            plane,
            &[
                "create",
                "token",
                "netaccel-dra-plugin",
                "-n",
                "default",
                "--duration=1h",
            ],
            None,
        );
        let secrets: Api<Secret> = Api::default_namespaced(plane.client.clone());
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "netaccel-dra-plugin-kubeconfig"},
            "stringData": {"kubeconfig": kubeconfig_with_token(plane, token.trim())}
        }))
        .unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();

        // Ready: the chart's readiness probe asks the plugin whether the kubelet
        // registered it.
        let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
        let plugin_pod = eventually(
            "the plugin's DaemonSet Pod ready",
            Duration::from_secs(90),
            || {
                let pods = pods.clone();
                async move {
                    let list = pods
                        .list(
                            &ListParams::default().labels("app.kubernetes.io/component=dra-plugin"),
                        )
                        .await
                        .ok()?;
                    let pod = list.items.into_iter().next()?;
                    let ready = pod
                        .status
                        .as_ref()?
                        .conditions
                        .as_ref()?
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True");
                    ready.then_some(pod.metadata.name?)
                }
            },
        )
        .await;
        assert!(
            node.dra_plugin_log().is_empty(),
            "no plugin runs beside the kubelet in this test"
        );

        let pod = sobel_claim_pod("edges-chart");
        pods.create(&PostParams::default(), &pod).await.unwrap();
        completed(plane, node, "edges-chart").await;
        let text = logs(plane, "edges-chart");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let want = hex(&accel::reference::sobel(&test_image(), WIDTH, HEIGHT));
        assert_eq!(lines[1], want, "over HTTP");
        assert_eq!(lines[2], want, "over RAC");

        eventually("the claim unprepared", Duration::from_secs(30), || {
            let specs = node.cdi_specs();
            async move { specs.is_empty().then_some(()) }
        })
        .await;
        let plugin_log = logs(plane, &plugin_pod);
        for event in ["\"serving\"", "\"prepared\"", "\"unprepared\""] {
            assert!(
                plugin_log.contains(event),
                "the DaemonSet's plugin logged no {event}:\n{plugin_log}"
            );
        }
        kubectl(
            plane,
            &["delete", "-n", "default", "--wait=true", "-f", "-"],
            Some(&rendered),
        );
    });
}
