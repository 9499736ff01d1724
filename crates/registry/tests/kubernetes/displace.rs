//! A reconfiguration that would take a claim's slot, with the claim's Pod running: the
//! netaccel node has two sobel slots; a Deployment's Pod holds a claim on one of them.
//! The node's admin asks that slot to load another accelerator: the registry refuses
//! (`409`, the slot is allocated to a ResourceClaim), and nothing moves — forced or
//! not, since a node without the registry's admin credential (`registry_token`) asks
//! as itself. Then the node is restarted with that slot configured for another
//! accelerator, within its lease (as an operator changing node.toml does): the
//! registry sees the slot report something else, unbinds the claim's instance and
//! evicts the Pod, the kubelet stops it, and the Deployment's replacement gets a new
//! claim, which the scheduler can only allocate from the other sobel slot, where its
//! first call succeeds.

use super::*;

/// The node lease: long enough for the node's restart to fall within it on a loaded
/// machine (a lost node would unbind the claim too, but by another path).
const LEASE_MS: &str = "10000";

/// `PUT /v1/slots/{slot}` on the netaccel node as its admin, `force` or not: the status
/// and the body.
fn reconfigure(node: &netns::Node, slot: u64, accelerator: &str, force: bool) -> (u16, String) {
    let mut request = ureq::put(&format!("http://{}/v1/slots/{slot}", node.http))
        .set("Authorization", &format!("Bearer {}", netns::NODE_TOKEN));
    if force {
        request = request.set("X-Netaccel-Reconfiguration", "force");
    }
    match request.send_json(json!({ "accelerator": accelerator })) {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(status, r)) => (status, r.into_string().unwrap()),
        Err(e) => panic!("PUT /v1/slots/{slot}: {e}"),
    }
}

#[test]
fn a_reconfiguration_taking_a_claims_slot_is_refused_and_a_node_reporting_another_moves_its_pod() {
    with_node(|mut c| async move {
        let Cluster { node, plane, net } = &mut c;
        let (registry, netaccel) =
            dra_setup_with(plane, net, node, &["sobel", "sobel"], LEASE_MS).await;
        let (pods, want, (first_pod, first_instance)) = deploy_calling(plane).await;
        let held = dra_instances(&registry, "sobel");
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!((&held[0].0, held[0].1.as_str()), (&first_instance, NODE));
        let slot = held[0].2;

        // Asked as the node's admin: the registry refuses, the slot keeps sobel.
        let (status, body) = reconfigure(&netaccel, slot, "to_uppercase", false);
        assert_eq!(status, 409, "{body}");
        assert!(body.contains("ResourceClaim"), "{body}");
        // Nothing moves: the same instance, the Pod running, 3 s later.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(dra_instances(&registry, "sobel"), held);
        let pod = pods.get(&first_pod).await.unwrap();
        assert!(
            pod.metadata.deletion_timestamp.is_none(),
            "{first_pod} evicted"
        );

        // Forced by the node's admin: still the registry's decision, still refused.
        let (status, body) = reconfigure(&netaccel, slot, "to_uppercase", true);
        assert_eq!(status, 409, "{body}");
        assert!(body.contains("ResourceClaim"), "{body}");
        assert_eq!(dra_instances(&registry, "sobel"), held);

        // The node restarted within its lease with to_uppercase in that slot.
        let mut slots = ["sobel", "sobel"];
        slots[slot as usize] = "to_uppercase";
        let mut netaccel = netaccel;
        netaccel.proc.kill();
        drop(netaccel);
        let _netaccel = netns::Node::start(net, 0, NODE, &registry.base, &slots, "");
        let (second_pod, second_instance) = called(plane, &pods, Some(&first_pod), &want).await;
        assert_ne!(second_instance, first_instance, "a new allocation");
        gone(&pods, &first_pod).await;
        let want = vec![(second_instance, NODE.to_string(), 1 - slot)];
        let mut last = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while last != want {
            assert!(
                Instant::now() < deadline,
                "{second_pod}: only the new claim's instance ({want:?}) within 30 s; the registry holds {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            last = dra_instances(&registry, "sobel");
        }
    });
}
