//! The Kubernetes figures of docs/benchmarks.md, on the test control plane. Ignored in
//! the suite (they take a minute); `bench/k8s/run.sh` runs them with a release build.
//!
//! - the webhook's latency: AdmissionReviews of a Deployment's Pods posted over HTTPS
//!   one after another, each binding an instance (p50/p99), and what the API server
//!   measured of its webhook calls during the scale-up below;
//! - a Deployment scaled from 0 to 100 replicas: Pods admitted (created, bound) per
//!   second, and the time until all are scheduled;
//! - a reconfiguration displacing a third of them: time until every displaced Pod is
//!   evicted, recreated, bound and scheduled elsewhere, at the default eviction rate
//!   (10/s) and at 100/s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::*;

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

/// An HTTPS client trusting the CA bundle the registry wrote.
async fn webhook_agent(plane: &ControlPlane) -> ureq::Agent {
    let api: Api<MutatingWebhookConfiguration> = Api::all(plane.client.clone());
    let config = api.get("netaccel").await.unwrap();
    let ca = config.webhooks.unwrap()[0]
        .client_config
        .ca_bundle
        .clone()
        .unwrap()
        .0;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca.as_slice()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    ureq::AgentBuilder::new().tls_config(Arc::new(tls)).build()
}

fn review(uid: &str) -> serde_json::Value {
    json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default", "operation": "CREATE", "userInfo": {},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "bench-7d9c-", "labels": {"app": "bench", "pod-template-hash": "7d9c"},
                    "annotations": {"netaccel.io/accelerator": "sobel"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "bench-7d9c", "uid": "u", "controller": true}]},
                "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1"}]}},
            "dryRun": false
        }
    })
}

/// `apiserver_admission_webhook_admission_duration_seconds` of our webhook: (count,
/// sum in s, calls within 5 ms, calls within 25 ms — the histogram's first buckets).
fn apiserver_webhook_seconds(plane: &ControlPlane) -> (f64, f64, f64, f64) {
    let mut get = plane.kubectl();
    get.args(["get", "--raw", "/metrics"]);
    let text = String::from_utf8(get.output().unwrap().stdout).unwrap();
    let (mut count, mut sum, mut within_5ms, mut within_25ms) = (0.0, 0.0, 0.0, 0.0);
    for line in text.lines().filter(|l| {
        l.starts_with("apiserver_admission_webhook_admission_duration_seconds_")
            && l.contains("name=\"pods.netaccel.io\"")
    }) {
        let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap_or(0.0);
        if line.contains("_count{") {
            count += value;
        } else if line.contains("_sum{") {
            sum += value;
        } else if line.contains("le=\"0.005\"") {
            within_5ms += value;
        } else if line.contains("le=\"0.025\"") {
            within_25ms += value;
        }
    }
    (count, sum, within_5ms, within_25ms)
}

#[test]
#[ignore = "a benchmark: bench/k8s/run.sh"]
fn bench_kubernetes_figures() {
    with_control_plane(|plane| async move {
        for rate in ["10", "100"] {
            let registry = Registry::start(
                &plane,
                &[
                    "--eviction-grace-s",
                    "0",
                    "--eviction-rate",
                    rate,
                    "--token",
                    "t",
                ],
            );
            registry.wait_leader(Duration::from_secs(20)).await;
            let _a = fake_node(&[&registry], NODES[0], registration(0, &["sobel"]));
            let b = fake_node(&[&registry], NODES[1], registration(1, &["sobel"]));
            let _c = fake_node(&[&registry], NODES[2], registration(2, &["sobel"]));
            webhook_configured(&plane).await;
            let name = format!("bench{rate}");

            if rate == "10" {
                // The webhook alone, 1 connection, 1000 reviews (each binds an instance).
                let agent = webhook_agent(&plane).await;
                let url = format!("https://{}/v1/admission/pods", registry.webhook);
                for i in 0..50 {
                    agent
                        .post(&url)
                        .send_json(review(&format!("warm-{i}")))
                        .unwrap();
                }
                let mut times = Vec::new();
                for i in 0..1000 {
                    let t = Instant::now();
                    let answer: serde_json::Value = agent
                        .post(&url)
                        .send_json(review(&format!("00000000-0000-0000-0000-{i:012}")))
                        .unwrap()
                        .into_json()
                        .unwrap();
                    times.push(t.elapsed());
                    assert_eq!(answer["response"]["allowed"], true, "{answer}");
                }
                times.sort();
                eprintln!(
                    "FIGURE webhook direct (1 connection, 1000 Pod reviews, each binding): p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
                    percentile(&times, 0.5),
                    percentile(&times, 0.99),
                    times.last().unwrap().as_secs_f64() * 1e3
                );
                // Those instances have no Pod: the watcher releases them after its grace.
                ureq::delete(&format!("{}/v1/functions/bench", registry.base))
                    .set("Authorization", &registry.auth)
                    .call()
                    .unwrap();
            }

            // 0 -> 100 replicas.
            let deployments: Api<Deployment> = Api::default_namespaced(plane.client.clone());
            deployments
                .create(
                    &PostParams::default(),
                    &deployment(&name, 0, json!({"netaccel.io/accelerator": "sobel"})),
                )
                .await
                .unwrap();
            let before = apiserver_webhook_seconds(&plane);
            let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
            let started = Instant::now();
            deployments
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"replicas": 100}})),
                )
                .await
                .unwrap();
            let selector = format!("app={name}");
            let admitted = eventually("100 Pods admitted", Duration::from_secs(120), || {
                let pods = pods.clone();
                let selector = selector.clone();
                async move {
                    let n = pods
                        .list(&ListParams::default().labels(&selector))
                        .await
                        .ok()?
                        .items
                        .len();
                    (n == 100).then(|| started.elapsed())
                }
            })
            .await;
            eventually("100 Pods scheduled", Duration::from_secs(120), || {
                settled(&pods, &name, 100, &[])
            })
            .await;
            let scheduled = started.elapsed();
            let after = apiserver_webhook_seconds(&plane);
            eprintln!(
                "FIGURE scale-up 0->100 (eviction rate {rate}/s run): all admitted in {:.2} s ({:.1} Pods/s), all scheduled in {:.2} s; the API server's webhook calls: mean {:.2} ms over {} calls, {} within 5 ms, {} within 25 ms",
                admitted.as_secs_f64(),
                100.0 / admitted.as_secs_f64(),
                scheduled.as_secs_f64(),
                (after.1 - before.1) / (after.0 - before.0).max(1.0) * 1e3,
                after.0 - before.0,
                after.2 - before.2,
                after.3 - before.3
            );

            // Reconfigure node-b's slot: its Pods are displaced.
            let on_b = settled(&pods, &name, 100, &[])
                .await
                .unwrap()
                .iter()
                .filter(|p| annotation(p, "netaccel.io/node") == Some(NODES[1]))
                .count();
            let started = Instant::now();
            ureq::post(&format!("{}/v1/reconfigurations", registry.base))
                .set("Authorization", &registry.auth)
                .send_json(
                    json!({"node": NODES[1], "device": "cpu0", "slot": 0, "accelerator": "topk"}),
                )
                .unwrap();
            b.set(registration(1, &["topk"]));
            eventually("displaced Pods rebound", Duration::from_secs(120), || {
                settled(&pods, &name, 100, &[NODES[1]])
            })
            .await;
            eprintln!(
                "FIGURE reconfiguration (eviction rate {rate}/s): {on_b} displaced Pods evicted, recreated, bound and scheduled in {:.2} s",
                started.elapsed().as_secs_f64()
            );
            deployments
                .delete(&name, &Default::default())
                .await
                .unwrap();
            let mut delete = plane.kubectl();
            delete.args([
                "delete",
                "pods",
                "-l",
                &selector,
                "--grace-period=0",
                "--force",
                "--wait=false",
            ]);
            let _ = delete.output();
        }
    });
}
