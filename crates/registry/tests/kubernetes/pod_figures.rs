//! The figures of docs/kubernetes.md ("Measured") with Pods that run, by an ignored
//! test: Pod created → first good call for Pods with claims one after another, and a
//! Deployment of 50 replicas with claims created at once until every replica has
//! called. Not a check: it prints.
//!
//! `cargo test -p netaccel-registry --test kubernetes_pods -- --ignored --nocapture figures`
//! (`NETACCEL_K8S_FIGURE_PODS` Pods one after another, 20 unless set).

use super::*;

/// The host's uptime in seconds (`/proc/uptime` is not namespaced: a container reads the
/// same clock).
pub(crate) fn uptime() -> f64 {
    let text = std::fs::read_to_string("/proc/uptime").unwrap();
    text.split_whitespace().next().unwrap().parse().unwrap()
}

/// What a measured Pod runs: one sobel call over HTTP, then `ok <uptime>` if its
/// output is `want` (else `bad`), then, for a Deployment's replica, sleep.
fn timed_script(want: &str, then_sleep: bool) -> String {
    format!(
        "out=$(netaccel call sobel -p width={WIDTH} -p height={HEIGHT} -i /in/image.raw | od -An -v -tx1 | tr -d ' \\n'); \
         if [ \"$out\" = \"{want}\" ]; then echo \"ok $(cut -d' ' -f1 /proc/uptime)\"; else echo bad; fi{}",
        if then_sleep { "; exec sleep 3600" } else { "" }
    )
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The figures of docs/kubernetes.md ("Measured"), not a check: Pod created → first
/// good call for 20 Pods with claims one after another, and a Deployment of 50 replicas
/// with claims scaled up at once until every replica has called.
#[test]
#[ignore]
fn figures_pod_start_to_first_call_and_50_pods_with_claims() {
    let runs: usize = std::env::var("NETACCEL_K8S_FIGURE_PODS")
        .map(|v| v.parse().unwrap())
        .unwrap_or(20);
    with_node_within(Duration::from_secs(900), |mut c| async move {
        let Cluster { node, plane, net } = &mut c;
        let slots = vec!["sobel"; 50];
        // A longer node lease than the tests': 50 Pods starting on 2 loaded cores can
        // delay the node's renewals past 1.5 s, and a lost node unbinds the claims.
        let (_registry, _netaccel) = dra_setup_with(plane, net, node, &slots, "10000").await;
        let want = hex(&accel::reference::sobel(&test_image(), WIDTH, HEIGHT));
        let with_claim = json!({
            "resourceClaims": [{"name": "acc", "resourceClaimTemplateName": "sobel"}],
            "volumes": [{"name": "in", "configMap": {"name": "image"}}],
            "containers": [{"resources": {"claims": [{"name": "acc"}]},
                "volumeMounts": [{"name": "in", "mountPath": "/in"}]}]
        });
        one_by_one(plane, node, &with_claim, &want, runs).await;
        fifty_at_once(plane, &with_claim, &want).await;
    });
}

/// `runs` Pods with a claim, each created once the previous has called and ended.
async fn one_by_one(
    plane: &ControlPlane,
    node: &mut KubeletNode,
    with_claim: &serde_json::Value,
    want: &str,
    runs: usize,
) {
    let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
    let mut one_by_one = Vec::new();
    for i in 0..runs {
        let name = format!("timed-{i}");
        let pod = script_pod(&name, &timed_script(want, false), with_claim.clone());
        let created = uptime();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        completed(plane, node, &name).await;
        let text = logs(plane, &name);
        let at: f64 = text
            .trim()
            .strip_prefix("ok ")
            .unwrap_or_else(|| panic!("{name}: {text}"))
            .parse()
            .unwrap();
        eprintln!("{name}: created → first good call {:.2} s", at - created);
        one_by_one.push(at - created);
        pods.delete(&name, &Default::default()).await.unwrap();
    }
    one_by_one.sort_by(f64::total_cmp);
    eprintln!(
        "{runs} Pods one by one, created → first good call: p50 {:.2} s, p90 {:.2} s, min {:.2} s, max {:.2} s",
        percentile(&one_by_one, 0.5),
        percentile(&one_by_one, 0.9),
        one_by_one[0],
        one_by_one[runs - 1]
    );
}

/// A Deployment of 50 replicas with claims, created at once.
async fn fifty_at_once(plane: &ControlPlane, with_claim: &serde_json::Value, want: &str) {
    let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
    let template = script_pod("unused", &timed_script(want, true), with_claim.clone());
    let mut spec = serde_json::to_value(template.spec.unwrap()).unwrap();
    spec["restartPolicy"] = json!("Always");
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "fifty"},
        "spec": {"replicas": 50, "selector": {"matchLabels": {"app": "fifty"}},
            "template": {"metadata": {"labels": {"app": "fifty"}}, "spec": spec}}
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::default_namespaced(plane.client.clone());
    let created = uptime();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let names = eventually("50 replicas running", Duration::from_secs(230), || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("app=fifty"))
                .await
                .ok()?;
            let running: Vec<String> = list
                .items
                .into_iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .filter_map(|p| p.metadata.name)
                .collect();
            (running.len() == 50).then_some(running)
        }
    })
    .await;
    let mut called = Vec::new();
    for name in &names {
        let text = eventually("the replica's call", Duration::from_secs(60), || {
            let text = logs(plane, name);
            async move { (!text.trim().is_empty()).then_some(text) }
        })
        .await;
        assert!(text.starts_with("ok "), "{name}: {text}");
        called.push(text.trim()[3..].parse::<f64>().unwrap() - created);
    }
    called.sort_by(f64::total_cmp);
    eprintln!(
        "50 replicas with claims at once: all called {:.1} s after the Deployment was created (first {:.1} s, p50 {:.1} s)",
        called[49],
        called[0],
        percentile(&called, 0.5)
    );
}
