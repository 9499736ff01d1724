//! `netaccel-registry --kubernetes` against a real control plane (see
//! `kubernetes/harness.rs`): the admission webhook binds the Pods of a Deployment and
//! the real kube-scheduler places them on the node holding their slot; a Pod nothing
//! can host is refused with the reason; a malformed review is answered 400. Through
//! DRA, the scheduler allocates a netaccel slot to a claim selecting its accelerator;
//! the slices follow reconfigurations and node loss.
//!
//! The netaccel nodes are stand-ins that renew their leases with `PUT /v1/nodes/NAME`
//! (as the client tests do): no call reaches them here. Their names are the
//! Kubernetes nodes' names.
//!
//! One control plane at a time (a lock): each takes a few hundred MB and most of a
//! core while it starts.

#[path = "kubernetes/bench.rs"]
mod bench;
#[path = "kubernetes/harness.rs"]
mod harness;
#[path = "kubernetes/support.rs"]
mod support;

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::{eventually, free_port, ControlPlane, NODES};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{json, Value};
use support::*;

#[test]
fn deployment_pods_are_bound_and_scheduled_onto_their_slots_node() {
    with_control_plane(|plane| async move {
        let registry = Registry::start(&plane, &[]);
        registry.wait_leader(Duration::from_secs(20)).await;
        let _nodes = [
            fake_node(&[&registry], NODES[0], registration(0, &["sobel", "echo"])),
            fake_node(&[&registry], NODES[1], registration(1, &["sobel"])),
            fake_node(&[&registry], NODES[2], registration(2, &["to_uppercase"])),
        ];
        webhook_configured(&plane).await;

        let deployments: Api<Deployment> = Api::default_namespaced(plane.client.clone());
        let started = Instant::now();
        deployments
            .create(
                &PostParams::default(),
                &deployment("edges", 4, json!({"netaccel.io/accelerator": "sobel"})),
            )
            .await
            .unwrap();
        let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
        let scheduled = eventually("4 Pods of edges scheduled", Duration::from_secs(60), || {
            let pods = pods.clone();
            async move {
                let list = pods
                    .list(&ListParams::default().labels("app=edges"))
                    .await
                    .ok()?;
                let done: Vec<Pod> = list
                    .items
                    .into_iter()
                    .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
                    .collect();
                (done.len() == 4).then_some(done)
            }
        })
        .await;
        eprintln!(
            "4 Pods admitted, bound and scheduled in {:.2} s",
            started.elapsed().as_secs_f64()
        );
        let function = registry.get("/v1/functions/edges");
        assert_eq!(function["accelerator"], "sobel");
        let instances = function["instances"].as_array().unwrap();
        assert_eq!(instances.len(), 4, "{function}");
        for pod in &scheduled {
            let node = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
            let id = annotation(pod, "netaccel.io/instance").expect("instance annotation");
            let binding = instances
                .iter()
                .find(|i| i["id"] == id)
                .unwrap_or_else(|| panic!("{id} is not an instance of edges: {function}"));
            // The scheduler put the Pod where its slot is, because of the selector.
            assert_eq!(binding["node"], node.as_str(), "{binding}");
            assert!(
                node == NODES[0] || node == NODES[1],
                "sobel is on a and b only: {node}"
            );
            let selector = pod.spec.as_ref().unwrap().node_selector.clone().unwrap();
            assert_eq!(selector["kubernetes.io/hostname"], node);
            assert_eq!(annotation(pod, "netaccel.io/node"), Some(node.as_str()));
            let env = env_of(pod);
            let index = NODES.iter().position(|n| *n == node).unwrap() + 1;
            for (k, v) in [
                ("NETACCEL_REGISTRY", registry.base.clone()),
                ("NETACCEL_FUNCTION", "edges".to_string()),
                ("NETACCEL_INSTANCE", id.to_string()),
                ("NETACCEL_NODE_HTTP", format!("10.0.0.{index}:8080")),
                ("NETACCEL_NODE_RAC", format!("10.0.0.{index}:9400")),
                ("NETACCEL_OPENCL_NODES", format!("10.0.0.{index}:9500")),
            ] {
                assert!(
                    env.contains(&(k.to_string(), v.clone())),
                    "{k}={v} in {env:?}"
                );
            }
        }

        // A Deployment registers its function before it has any Pod.
        deployments
            .create(
                &PostParams::default(),
                &deployment(
                    "idle",
                    0,
                    json!({"netaccel.io/accelerator": "topk", "netaccel.io/backend": "cpu"}),
                ),
            )
            .await
            .unwrap();
        let idle = eventually(
            "the function of Deployment idle",
            Duration::from_secs(10),
            || {
                let url = format!("{}/v1/functions/idle", registry.base);
                async move { ureq::get(&url).call().ok()?.into_json::<Value>().ok() }
            },
        )
        .await;
        assert_eq!(idle["accelerator"], "topk");
        assert_eq!(idle["query"]["backend"], "cpu");
        assert_eq!(idle["instances"], json!([]));

        // Nothing can load this accelerator: refused, with the reason.
        let bare: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "lonely", "annotations": {"netaccel.io/accelerator": "nonesuch"}},
            "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1"}]}
        }))
        .unwrap();
        let err = pods
            .create(&PostParams::default(), &bare)
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("no slot can take an instance of lonely (nonesuch)"),
            "{text}"
        );
        // What a user sees.
        let mut run = plane.kubectl();
        run.args(["run", "lonely2", "--image=example.invalid/app:1"]);
        run.arg("--annotations=netaccel.io/accelerator=nonesuch");
        let out = run.output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
        eprintln!("$ kubectl run lonely2 --image=… --annotations=netaccel.io/accelerator=nonesuch\n{said}");
        assert!(!out.status.success());
        assert!(
            said.contains("admission webhook \"pods.netaccel.io\" denied the request")
                && said.contains("no slot can take an instance of lonely2 (nonesuch)"),
            "{said}"
        );
        // Bad annotations: refused, the annotation named.
        let mut bad = bare.clone();
        bad.metadata.annotations = Some(
            [
                ("netaccel.io/accelerator".to_string(), "sobel".to_string()),
                ("netaccel.io/backend".to_string(), "fpga".to_string()),
            ]
            .into(),
        );
        let text = pods
            .create(&PostParams::default(), &bad)
            .await
            .unwrap_err()
            .to_string();
        assert!(text.contains("netaccel.io/backend"), "{text}");
        // Pods without the annotation pass untouched.
        let mut plain = bare.clone();
        plain.metadata.annotations = None;
        let created = pods.create(&PostParams::default(), &plain).await.unwrap();
        assert!(created.metadata.annotations.is_none());
        assert!(created.spec.unwrap().containers[0].env.is_none());

        // A malformed review: 400, and the webhook keeps serving.
        for body in [
            "{",
            "{\"kind\":\"AdmissionReview\",\"apiVersion\":\"admission.k8s.io/v1\"}",
        ] {
            let out = Command::new("curl")
                .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
                .args([
                    "-H",
                    "content-type: application/json",
                    "--data-binary",
                    body,
                ])
                .arg(format!("https://{}/v1/admission/pods", registry.webhook))
                .stderr(Stdio::inherit())
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), "400", "{body}");
        }
        let mut again = bare.clone();
        again.metadata.name = Some("again".into());
        again.metadata.annotations =
            Some([("netaccel.io/accelerator".to_string(), "echo".to_string())].into());
        let created = pods.create(&PostParams::default(), &again).await.unwrap();
        assert_eq!(annotation(&created, "netaccel.io/node"), Some(NODES[0]));
        let mut plane = plane;
        plane.check_alive();
    });
}

#[test]
fn the_scheduler_allocates_netaccel_slots_through_dra() {
    with_control_plane(|plane| async move {
        let registry = Registry::start(&plane, &["--eviction-grace-s", "0"]);
        registry.wait_leader(Duration::from_secs(20)).await;
        let _a = fake_node(&[&registry], NODES[0], registration(0, &["echo", "topk"]));
        let b = fake_node(&[&registry], NODES[1], registration(1, &["sobel", "echo"]));
        let c = fake_node(&[&registry], NODES[2], registration(2, &["to_uppercase"]));

        let slices: Api<ResourceSlice> = Api::all(plane.client.clone());
        let published = eventually("three ResourceSlices", Duration::from_secs(30), || {
            let slices = slices.clone();
            async move {
                let list = slices.list(&ListParams::default()).await.ok()?;
                (list.items.len() == 3).then_some(list.items)
            }
        })
        .await;
        let of_b = published
            .iter()
            .find(|s| s.spec.pool.name == NODES[1])
            .expect("node-b's pool");
        assert_eq!(of_b.spec.driver, "netaccel.io");
        assert_eq!(of_b.spec.node_name.as_deref(), Some(NODES[1]));
        assert_eq!(
            slice_devices(of_b),
            [
                ("cpu0-slot-0".to_string(), "sobel".to_string()),
                ("cpu0-slot-1".into(), "echo".into())
            ]
        );
        let attrs = of_b.spec.devices.as_ref().unwrap()[0]
            .attributes
            .clone()
            .unwrap();
        for (k, v) in [
            ("backend", "cpu"),
            ("vendor", "netaccel"),
            ("node", NODES[1]),
            ("hash", ""),
        ] {
            assert_eq!(attrs[k].string.as_deref(), Some(v), "{k}");
        }
        let classes: Api<DeviceClass> = Api::all(plane.client.clone());
        assert!(classes.get_opt("netaccel.io").await.unwrap().is_some());

        // A claim template selecting sobel, and a Pod using it: the scheduler
        // allocates node-b's sobel slot and puts the Pod on node-b.
        let templates: Api<ResourceClaimTemplate> = Api::default_namespaced(plane.client.clone());
        let template = sobel_template();
        templates
            .create(&PostParams::default(), &template)
            .await
            .unwrap();
        // A Deployment's Pod using it: the scheduler allocates node-b's sobel slot and
        // puts the Pod on node-b.
        let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
        let deployments: Api<Deployment> = Api::default_namespaced(plane.client.clone());
        let started = Instant::now();
        deployments
            .create(
                &PostParams::default(),
                &claiming_deployment("edge-detector"),
            )
            .await
            .unwrap();
        let (pod, node) = scheduled_pod(&pods, "edge-detector", &[]).await;
        eprintln!(
            "DRA: claim allocated and Pod scheduled in {:.2} s",
            started.elapsed().as_secs_f64()
        );
        assert_eq!(node, NODES[1]);
        let claims: Api<ResourceClaim> = Api::default_namespaced(plane.client.clone());
        let claim = claim_of(&claims, &pod).await;
        let allocation = claim.status.clone().unwrap().allocation.expect("allocated");
        let results = allocation.devices.unwrap().results.unwrap_or_default();
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].driver, "netaccel.io");
        assert_eq!(results[0].pool, NODES[1]);
        assert_eq!(results[0].device, "cpu0-slot-0");

        // The registry records the allocation as an instance pinned to that slot, and
        // notes in the claim what the device held.
        let id = format!("dra-{}-0", claim.metadata.uid.as_deref().unwrap());
        let recorded = eventually("the claim's instance", Duration::from_secs(10), || {
            let instances = dra_instances(&registry, "sobel");
            async move { (!instances.is_empty()).then_some(instances) }
        })
        .await;
        assert_eq!(recorded, [(id.clone(), NODES[1].to_string(), 0)]);
        let doc = registry.get("/v1/functions/dra.sobel");
        assert_eq!(doc["instances"][0]["pinned"], true, "{doc}");
        eventually("the claim annotated", Duration::from_secs(10), || {
            let claims = claims.clone();
            let name = claim.metadata.name.clone().unwrap();
            async move {
                let c = claims.get(&name).await.ok()?;
                (c.metadata.annotations?.get("netaccel.io/accelerator")? == "sobel").then_some(())
            }
        })
        .await;
        // Nobody but the admin may load something else into it.
        let refused = ureq::post(&format!("{}/v1/reconfigurations", registry.base))
            .send_json(
                json!({"node": NODES[1], "device": "cpu0", "slot": 0, "accelerator": "topk"}),
            )
            .unwrap_err();
        let ureq::Error::Status(409, response) = refused else {
            panic!("{refused:?}")
        };
        let verdict: Value = response.into_json().unwrap();
        assert!(
            verdict["reason"]
                .as_str()
                .unwrap()
                .contains("ResourceClaim"),
            "{verdict}"
        );

        // A reconfiguration of the other slot changes the published device.
        let verdict: Value = ureq::post(&format!("{}/v1/reconfigurations", registry.base))
            .send_json(
                json!({"node": NODES[1], "device": "cpu0", "slot": 1, "accelerator": "topk"}),
            )
            .unwrap()
            .into_json()
            .unwrap();
        assert_eq!(verdict["allowed"], true, "{verdict}");
        b.set(registration(1, &["sobel", "topk"]));
        eventually("node-b's slice shows topk", Duration::from_secs(10), || {
            let slices = slices.clone();
            async move {
                let s = slices.get(&format!("netaccel-{}", NODES[1])).await.ok()?;
                slice_devices(&s)
                    .contains(&("cpu0-slot-1".into(), "topk".into()))
                    .then_some(())
            }
        })
        .await;
        // A standalone claim on it, used by a bare Pod.
        let solo: ResourceClaim = serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "solo"},
            "spec": {"devices": {"requests": [{"name": "acc", "exactly": {
                "deviceClassName": "netaccel.io",
                "selectors": [{"cel": {"expression":
                    "device.attributes[\"netaccel.io\"].accelerator == \"topk\" && device.attributes[\"netaccel.io\"].node == \"node-b\""}}]
            }}]}}
        }))
        .unwrap();
        claims.create(&PostParams::default(), &solo).await.unwrap();
        let solo_pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "solo", "labels": {"app": "solo"}},
            "spec": {
                "resourceClaims": [{"name": "acc", "resourceClaimName": "solo"}],
                "containers": [{"name": "app", "image": "example.invalid/app:1",
                    "resources": {"claims": [{"name": "acc"}]}}]
            }
        }))
        .unwrap();
        pods.create(&PostParams::default(), &solo_pod)
            .await
            .unwrap();
        let (_, on) = scheduled_pod(&pods, "solo", &[]).await;
        assert_eq!(on, NODES[1]);
        let solo_instance =
            eventually("the solo claim's instance", Duration::from_secs(10), || {
                let instances = dra_instances(&registry, "topk");
                async move { (instances.len() == 1).then(|| instances[0].0.clone()) }
            })
            .await;
        // A second Pod sharing that claim, allocated already: the webhook gives it the
        // environment of the claim's instance.
        let mut shared = solo_pod.clone();
        shared.metadata.name = Some("solo-too".into());
        shared.metadata.labels = Some([("app".to_string(), "solo-too".to_string())].into());
        let created = pods.create(&PostParams::default(), &shared).await.unwrap();
        let env = env_of(&created);
        for (k, v) in [
            ("NETACCEL_FUNCTION", "dra.topk".to_string()),
            ("NETACCEL_INSTANCE", solo_instance.clone()),
            ("NETACCEL_NODE_HTTP", "10.0.0.2:8080".to_string()),
            ("NETACCEL_NODE_RAC", "10.0.0.2:9400".to_string()),
        ] {
            assert!(
                env.contains(&(k.to_string(), v.clone())),
                "{k}={v} in {env:?}"
            );
        }
        let (_, on) = scheduled_pod(&pods, "solo-too", &[]).await;
        assert_eq!(on, NODES[1]);

        // node-c can now host sobel too; then node-b stops renewing its lease: lost,
        // and its slice goes.
        c.set(registration(2, &["to_uppercase", "sobel"]));
        eventually(
            "node-c's slice shows sobel",
            Duration::from_secs(10),
            || {
                let slices = slices.clone();
                async move {
                    let s = slices.get(&format!("netaccel-{}", NODES[2])).await.ok()?;
                    slice_devices(&s)
                        .contains(&("cpu0-slot-1".into(), "sobel".into()))
                        .then_some(())
                }
            },
        )
        .await;
        drop(b);
        let lost = Instant::now();
        eventually("node-b's slice deleted", Duration::from_secs(10), || {
            let slices = slices.clone();
            async move {
                slices
                    .get_opt(&format!("netaccel-{}", NODES[1]))
                    .await
                    .ok()?
                    .is_none()
                    .then_some(())
            }
        })
        .await;
        eprintln!(
            "DRA: lost node's slice deleted {:.2} s after its last renewal (lease 1.5 s)",
            lost.elapsed().as_secs_f64()
        );
        // The claims on its devices: their Pods are evicted; the Deployment's new Pod
        // gets a new claim, which the scheduler allocates on node-c; the standalone
        // claim is deallocated by the resourceclaim controller. The registry follows.
        let (moved, on) = scheduled_pod(&pods, "edge-detector", &[NODES[1]]).await;
        assert_eq!(on, NODES[2]);
        assert_ne!(moved.metadata.uid, pod.metadata.uid);
        // The evicted Pods stay Terminating until their kubelet says they stopped (on
        // a dead machine: until the Node is marked out-of-service and the Pod GC
        // deletes them); their claims stay reserved until then. There is no kubelet
        // here: the test confirms for it.
        let gone = eventually("both claims' Pods evicted", Duration::from_secs(10), || {
            let pods = pods.clone();
            async move {
                let list = pods.list(&ListParams::default()).await.ok()?;
                let names: Vec<String> = list
                    .items
                    .into_iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_some())
                    .filter_map(|p| p.metadata.name)
                    .collect();
                (names.len() == 3).then_some(names)
            }
        })
        .await;
        assert!(
            gone.contains(&"solo".to_string()) && gone.contains(&"solo-too".to_string()),
            "{gone:?}"
        );
        for name in &gone {
            let force = kube::api::DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            };
            let _ = pods.delete(name, &force).await;
        }
        let new_claim = claim_of(&claims, &moved).await;
        let new_id = format!("dra-{}-0", new_claim.metadata.uid.as_deref().unwrap());
        eventually(
            "the instance follows the claim",
            Duration::from_secs(20),
            || {
                let instances = dra_instances(&registry, "sobel");
                let want = [(new_id.clone(), NODES[2].to_string(), 1)];
                async move { (instances == want).then_some(()) }
            },
        )
        .await;
        eprintln!(
            "DRA: the lost node's claim Pod evicted and re-allocated on node-c {:.2} s after node-b's last renewal",
            lost.elapsed().as_secs_f64()
        );
        eventually(
            "the solo claim deallocated",
            Duration::from_secs(20),
            || {
                let claims = claims.clone();
                async move {
                    let c = claims.get("solo").await.ok()?;
                    c.status
                        .is_none_or(|s| s.allocation.is_none())
                        .then_some(())
                }
            },
        )
        .await;
        assert!(
            pods.get_opt("solo").await.unwrap().is_none(),
            "solo evicted"
        );
        assert!(pods.get_opt("solo-too").await.unwrap().is_none());
        eventually(
            "the solo claim's instance released",
            Duration::from_secs(10),
            || {
                let instances = dra_instances(&registry, "topk");
                async move { instances.is_empty().then_some(()) }
            },
        )
        .await;
        let mut plane = plane;
        plane.check_alive();
    });
}

#[test]
fn displaced_pods_are_evicted_and_bound_anew() {
    with_control_plane(|plane| async move {
        let registry = Registry::start(
            &plane,
            &[
                "--eviction-grace-s",
                "0",
                "--reconfigure-timeout-ms",
                "500",
                "--token",
                "admin-secret",
            ],
        );
        let _a = fake_node(&[&registry], NODES[0], registration(0, &["sobel", "echo"]));
        let b = fake_node(&[&registry], NODES[1], registration(1, &["sobel"]));
        let _c = fake_node(
            &[&registry],
            NODES[2],
            registration(2, &["to_uppercase", "sobel"]),
        );
        webhook_configured(&plane).await;
        let deployments: Api<Deployment> = Api::default_namespaced(plane.client.clone());
        deployments
            .create(
                &PostParams::default(),
                &deployment("edges", 6, json!({"netaccel.io/accelerator": "sobel"})),
            )
            .await
            .unwrap();
        let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
        let first = eventually("6 Pods placed", Duration::from_secs(60), || {
            settled(&pods, "edges", 6, &[])
        })
        .await;
        let on_b = first
            .iter()
            .filter(|p| annotation(p, "netaccel.io/node") == Some(NODES[1]))
            .count();
        assert!(on_b > 0, "allocation spreads over the three sobel slots");

        // The admin loads topk into node-b's only slot (the node reports it from now
        // on): the instances there move, their Pods are evicted, the ReplicaSet makes
        // new ones and the webhook binds them on node-a or node-c.
        let started = Instant::now();
        let verdict: Value = ureq::post(&format!("{}/v1/reconfigurations", registry.base))
            .set("Authorization", &registry.auth)
            .send_json(
                json!({"node": NODES[1], "device": "cpu0", "slot": 0, "accelerator": "topk"}),
            )
            .unwrap()
            .into_json()
            .unwrap();
        assert_eq!(verdict["allowed"], true, "{verdict}");
        b.set(registration(1, &["topk"]));
        eventually(
            "displaced Pods rebound off node-b",
            Duration::from_secs(60),
            || settled(&pods, "edges", 6, &[NODES[1]]),
        )
        .await;
        eprintln!(
            "reconfiguration: {on_b} displaced Pod(s) evicted and rebound in {:.2} s",
            started.elapsed().as_secs_f64()
        );

        // node-a stops renewing: lost one lease later, its instances move to node-c,
        // its Pods are evicted and rebound there.
        drop(_a);
        let lost = Instant::now();
        let last = eventually(
            "Pods rebound after node-a was lost",
            Duration::from_secs(60),
            || settled(&pods, "edges", 6, &[NODES[0], NODES[1]]),
        )
        .await;
        eprintln!(
            "node loss: Pods rebound on node-c {:.2} s after node-a's last renewal (lease 1.5 s)",
            lost.elapsed().as_secs_f64()
        );
        assert!(last
            .iter()
            .all(|p| annotation(p, "netaccel.io/node") == Some(NODES[2])));
        // Instances of Pods that are gone were released: one per live Pod.
        let ids: Vec<String> = last
            .iter()
            .map(|p| annotation(p, "netaccel.io/instance").unwrap().to_string())
            .collect();
        eventually("one instance per live Pod", Duration::from_secs(20), || {
            let function = registry.get("/v1/functions/edges");
            let mut have: Vec<String> = function["instances"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["id"].as_str().unwrap().to_string())
                .collect();
            let mut want = ids.clone();
            have.sort();
            want.sort();
            async move { (have == want).then_some(()) }
        })
        .await;
        let mut plane = plane;
        plane.check_alive();
    });
}

#[test]
fn replicas_elect_a_leader_through_a_lease_and_a_new_leader_rebuilds() {
    with_control_plane(|plane| async move {
        let ttl = ["--election-ttl-s", "2"];
        let first = Registry::start(&plane, &ttl);
        first.wait_leader(Duration::from_secs(20)).await;
        let second = Registry::start(&plane, &ttl);
        let _nodes = [
            fake_node(&[&first, &second], NODES[0], registration(0, &["sobel"])),
            fake_node(&[&first, &second], NODES[1], registration(1, &["sobel"])),
        ];
        webhook_configured(&plane).await;
        // One leader; the follower sends writers to it.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(first.leads() && !second.leads());
        let refused = ureq::put(&format!("{}/v1/functions/x", second.base))
            .send_json(json!({"accelerator": "sobel"}))
            .unwrap_err();
        let ureq::Error::Status(503, response) = refused else {
            panic!("{refused:?}")
        };
        assert_eq!(
            response.header("location"),
            Some(format!("{}/v1/functions/x", first.base).as_str())
        );
        let leases: Api<Lease> = Api::default_namespaced(plane.client.clone());
        let lease = leases.get("netaccel-registry").await.unwrap();
        assert_eq!(
            lease.spec.unwrap().holder_identity,
            Some(first.base.clone())
        );
        // The follower answers reads from the leader's state, which it copies.
        let written = Instant::now();
        ureq::put(&format!("{}/v1/functions/x", first.base))
            .send_json(json!({"accelerator": "sobel"}))
            .unwrap();
        let copied = eventually("the follower reads x", Duration::from_secs(10), || {
            let url = format!("{}/v1/functions/x", second.base);
            async move { ureq::get(&url).call().ok()?.into_json::<Value>().ok() }
        })
        .await;
        eprintln!(
            "a follower answered a write to the leader {:.2} s after it (copy period 0.5 s)",
            written.elapsed().as_secs_f64()
        );
        assert_eq!(copied, first.get("/v1/functions/x"));
        let nodes = second.get("/v1/nodes");
        let names: Vec<&str> = nodes
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, [NODES[0], NODES[1]]);

        let deployments: Api<Deployment> = Api::default_namespaced(plane.client.clone());
        deployments
            .create(
                &PostParams::default(),
                &deployment("edges", 3, json!({"netaccel.io/accelerator": "sobel"})),
            )
            .await
            .unwrap();
        let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
        let placed = eventually("3 Pods placed", Duration::from_secs(60), || {
            settled(&pods, "edges", 3, &[])
        })
        .await;
        // And a Pod with a claim the scheduler allocates a sobel slot to.
        let templates: Api<ResourceClaimTemplate> = Api::default_namespaced(plane.client.clone());
        templates
            .create(&PostParams::default(), &sobel_template())
            .await
            .unwrap();
        deployments
            .create(
                &PostParams::default(),
                &claiming_deployment("edge-detector"),
            )
            .await
            .unwrap();
        let (claiming, claim_node) = scheduled_pod(&pods, "edge-detector", &[]).await;
        let claims: Api<ResourceClaim> = Api::default_namespaced(plane.client.clone());
        let claim = claim_of(&claims, &claiming).await;
        let claim_instance = format!("dra-{}-0", claim.metadata.uid.as_deref().unwrap());
        let recorded = eventually("the claim's instance", Duration::from_secs(10), || {
            let instances = dra_instances(&first, "sobel");
            async move { (instances.len() == 1).then_some(instances) }
        })
        .await;
        assert_eq!(recorded[0].0, claim_instance);
        assert_eq!(recorded[0].1, claim_node);
        eventually(
            "the follower reads the same instances",
            Duration::from_secs(10),
            || {
                let same = dra_instances(&second, "sobel") == recorded
                    && second.get("/v1/functions/edges") == first.get("/v1/functions/edges");
                async move { same.then_some(()) }
            },
        )
        .await;

        // The leader dies: the follower takes the Lease within its TTL, points the
        // webhook at itself and rebuilds the Pods' instances from the Pods.
        let killed = Instant::now();
        drop(first);
        let took_over = second.wait_leader(Duration::from_secs(15)).await;
        eprintln!(
            "Lease failover: the follower led {:.2} s after the leader was killed (TTL 2 s)",
            took_over.as_secs_f64()
        );
        let mut want: Vec<(String, String)> = placed
            .iter()
            .map(|p| {
                (
                    annotation(p, "netaccel.io/instance").unwrap().to_string(),
                    annotation(p, "netaccel.io/node").unwrap().to_string(),
                )
            })
            .collect();
        want.sort();
        eventually(
            "the Pods' instances rebuilt",
            Duration::from_secs(20),
            || {
                let ok = instance_nodes(&second, "edges") == want;
                async move { ok.then_some(()) }
            },
        )
        .await;
        eprintln!(
            "state rebuilt from the Pods {:.2} s after the kill",
            killed.elapsed().as_secs_f64()
        );
        // The claim's instance too, on the same slot, from the claim.
        eventually(
            "the claim's instance rebuilt",
            Duration::from_secs(20),
            || {
                let instances = dra_instances(&second, "sobel");
                let recorded = recorded.clone();
                async move { (instances == recorded).then_some(()) }
            },
        )
        .await;
        eprintln!(
            "state rebuilt from the Pods and the claims {:.2} s after the kill",
            killed.elapsed().as_secs_f64()
        );
        // The new leader binds new Pods (the webhook now points at it).
        deployments
            .patch(
                "edges",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&json!({"spec": {"replicas": 4}})),
            )
            .await
            .unwrap();
        eventually(
            "a fourth Pod bound by the new leader",
            Duration::from_secs(30),
            || settled(&pods, "edges", 4, &[]),
        )
        .await;
        // Nothing was evicted: the three Pods are the same.
        let now = settled(&pods, "edges", 4, &[]).await.unwrap();
        for p in &placed {
            assert!(now.iter().any(|q| q.metadata.name == p.metadata.name));
        }
        let (still, _) = scheduled_pod(&pods, "edge-detector", &[]).await;
        assert_eq!(
            still.metadata.uid, claiming.metadata.uid,
            "the claim's Pod stays"
        );

        // That leader dies too, and a replica started afresh (nothing to copy) takes
        // the Lease: it rebuilds everything from the API server, the webhook's
        // instances from the Pods and the claims' from the claims.
        let mut want: Vec<(String, String)> = now
            .iter()
            .map(|p| {
                (
                    annotation(p, "netaccel.io/instance").unwrap().to_string(),
                    annotation(p, "netaccel.io/node").unwrap().to_string(),
                )
            })
            .collect();
        want.sort();
        let slices: Api<ResourceSlice> = Api::all(plane.client.clone());
        let slice_uids = || async {
            let mut uids: Vec<String> = slices
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter_map(|s| s.metadata.uid)
                .collect();
            uids.sort();
            uids
        };
        let published = slice_uids().await;
        assert_eq!(published.len(), 2, "node-a's and node-b's slices");
        drop(second);
        let third = Registry::start(&plane, &ttl);
        let _renewing = [
            fake_node(&[&third], NODES[0], registration(0, &["sobel"])),
            fake_node(&[&third], NODES[1], registration(1, &["sobel"])),
        ];
        let fresh = Instant::now();
        third.wait_leader(Duration::from_secs(15)).await;
        eprintln!(
            "a fresh replica led {:.2} s after it started",
            fresh.elapsed().as_secs_f64()
        );
        eventually(
            "everything rebuilt by a fresh replica",
            Duration::from_secs(20),
            || {
                let edges = instance_nodes(&third, "edges");
                let claimed = dra_instances(&third, "sobel");
                let ok = edges == want && claimed == recorded;
                async move { ok.then_some(()) }
            },
        )
        .await;
        eprintln!(
            "a fresh replica rebuilt the state from the Pods and the claims {:.2} s after it started",
            fresh.elapsed().as_secs_f64()
        );
        let (still, _) = scheduled_pod(&pods, "edge-detector", &[]).await;
        assert_eq!(still.metadata.uid, claiming.metadata.uid);
        // The slices were kept, not deleted while the fresh leader knew no node.
        assert_eq!(slice_uids().await, published);
        assert!(settled(&pods, "edges", 4, &[]).await.is_some());
        let mut plane = plane;
        plane.check_alive();
    });
}

#[test]
fn the_helm_chart_lints_renders_and_is_accepted_by_the_api_server() {
    with_control_plane(|plane| async move {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let chart = root.join("deploy/helm/netaccel");
        let helm = || {
            let mut c = Command::new(harness::helm());
            c.env("HELM_CACHE_HOME", plane.dir.join("helm-cache"))
                .env("HELM_CONFIG_HOME", plane.dir.join("helm-config"))
                .env("HELM_DATA_HOME", plane.dir.join("helm-data"));
            c
        };
        let mut lint = helm();
        lint.arg("lint")
            .arg(&chart)
            .args(["--kube-version", "1.34.2"]);
        run(lint, "helm lint");
        // With cert-manager and the Prometheus operator present, their objects appear.
        let mut lint = helm();
        lint.arg("lint")
            .arg(&chart)
            .args(["--kube-version", "1.34.2"]);
        lint.args([
            "--set",
            "webhook.certManager=true",
            "--set",
            "serviceMonitor=true",
        ]);
        run(lint, "helm lint (cert-manager, ServiceMonitor)");
        let mut template = helm();
        template.args(["template", "netaccel"]).arg(&chart);
        template.args(["--namespace", "netaccel", "--kube-version", "1.34.2"]);
        template.args([
            "--api-versions",
            "cert-manager.io/v1",
            "--api-versions",
            "monitoring.coreos.com/v1",
        ]);
        let with_crds = run(template, "helm template (cert-manager, ServiceMonitor)");
        for kind in [
            "kind: Certificate",
            "kind: MutatingWebhookConfiguration",
            "kind: ServiceMonitor",
        ] {
            assert!(with_crds.contains(kind), "{kind} missing");
        }

        // deploy/kubernetes/netaccel.yaml is the chart's render.
        let mut template = helm();
        template.args(["template", "netaccel"]).arg(&chart);
        template.args(["--namespace", "netaccel", "--kube-version", "1.34.2"]);
        let rendered = run(template, "helm template");
        let manifests = root.join("deploy/kubernetes/netaccel.yaml");
        let committed = std::fs::read_to_string(&manifests).unwrap();
        let body: String = committed
            .lines()
            .skip_while(|l| l.starts_with("# Rendered") || l.starts_with("# kubectl"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            body, rendered,
            "deploy/kubernetes/netaccel.yaml is stale: run deploy/kubernetes/render.sh"
        );

        // The real API server accepts every object of it.
        let mut ns = plane.kubectl();
        ns.args(["create", "namespace", "netaccel"]);
        run(ns, "kubectl create namespace");
        let mut apply = plane.kubectl();
        apply
            .args(["apply", "--dry-run=server", "-n", "netaccel", "-f"])
            .arg(&manifests);
        let out = run(apply, "kubectl apply --dry-run=server");
        let accepted = out
            .lines()
            .filter(|l| l.ends_with("(server dry run)"))
            .count();
        let objects = rendered.matches("\nkind: ").count();
        assert_eq!(accepted, objects, "{out}");

        // With the DRA kubelet plugin's DaemonSet (off by default): it lints, and the
        // API server accepts its objects too.
        let mut lint = helm();
        lint.arg("lint").arg(&chart).args([
            "--kube-version",
            "1.34.2",
            "--set",
            "draPlugin.enabled=true",
        ]);
        run(lint, "helm lint (DRA plugin)");
        let mut template = helm();
        template.args(["template", "netaccel"]).arg(&chart);
        template.args(["--namespace", "netaccel", "--kube-version", "1.34.2"]);
        template.args(["--set", "draPlugin.enabled=true"]);
        let with_plugin = run(template, "helm template (DRA plugin)");
        assert!(with_plugin.contains("name: netaccel-dra-plugin"));
        let file = plane.dir.join("with-dra-plugin.yaml");
        std::fs::write(&file, &with_plugin).unwrap();
        let mut apply = plane.kubectl();
        apply
            .args(["apply", "--dry-run=server", "-n", "netaccel", "-f"])
            .arg(&file);
        let out = run(apply, "kubectl apply --dry-run=server (DRA plugin)");
        let accepted = out
            .lines()
            .filter(|l| l.ends_with("(server dry run)"))
            .count();
        assert_eq!(accepted, with_plugin.matches("\nkind: ").count(), "{out}");
        let mut plane = plane;
        plane.check_alive();
    });
}
