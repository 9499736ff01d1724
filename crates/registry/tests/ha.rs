//! High availability, black-box: a real etcd (Debian's `etcd-server`) on free ports
//! with its own data directory, three `netaccel-registry` replicas on it. Exactly one
//! leads; a follower sends writers to it; when it is killed with SIGKILL another leads
//! within 5 s with every binding intact.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;
mod etcd;
use common::{free_port, wait_for_port};
use etcd::Etcd;

struct Replica {
    child: Child,
    base: String,
}

impl Replica {
    fn start(etcd: &Etcd) -> Replica {
        let listen = format!("127.0.0.1:{}", free_port());
        let store = format!("etcd://{}", etcd.client);
        let mut child = Command::new(env!("CARGO_BIN_EXE_netaccel-registry"))
            .args([
                "--listen",
                &listen,
                "--log-level",
                "warn",
                "--store",
                &store,
            ])
            // A 3 s election lease: a dead leader is replaced within 5 s.
            .args(["--election-ttl-s", "3"])
            // The fake nodes never renew: they must outlive the test.
            .args(["--lease-ms", "600000"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting netaccel-registry");
        wait_for_port(listen.parse().unwrap(), &mut child, "netaccel-registry");
        Replica {
            child,
            base: format!("http://{listen}"),
        }
    }

    /// (status, JSON body or the text, Location).
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value, Option<String>) {
        call(&self.base, method, path, body)
    }

    fn leads(&self) -> bool {
        let (status, text, _) = self.call("GET", "/metrics", None);
        assert_eq!(status, 200);
        let value = text
            .as_str()
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("netaccel_registry_leader "))
            .expect("a leader gauge")
            .to_string();
        match value.as_str() {
            "1" => true,
            "0" => false,
            other => panic!("leader gauge {other}"),
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request to the replica at `base`: (status, JSON body or the text, Location).
fn call(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value, Option<String>) {
    let agent = ureq::AgentBuilder::new()
        .redirects(0)
        .timeout(Duration::from_secs(5))
        .build();
    let req = agent.request(method, &format!("{}{path}", base));
    let result = match body {
        Some(b) => req
            .set("Content-Type", "application/json")
            .send_string(&b.to_string()),
        None => req.call(),
    };
    let response = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {}{path}: {e}", base),
    };
    let status = response.status();
    let location = response.header("location").map(String::from);
    let text = response.into_string().unwrap();
    let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, json, location)
}

/// Polls until exactly one of `replicas` leads; its index.
fn one_leader(replicas: &[&Replica], within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let leaders: Vec<usize> = (0..replicas.len())
            .filter(|&i| replicas[i].leads())
            .collect();
        assert!(leaders.len() <= 1, "two leaders: {leaders:?}");
        if let [one] = leaders[..] {
            return one;
        }
        assert!(Instant::now() < deadline, "no leader within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn fake_node(port: u16) -> Value {
    json!({
        "http": format!("127.0.0.1:{port}"),
        "rac": format!("127.0.0.1:{}", port + 1),
        "opencl": null,
        "devices": [{"id": "cpu0", "backend": "cpu", "vendor": "netaccel", "platform": "host",
            "slots": [
                {"id": 0, "accelerator": "sobel", "hash": "h", "busy_ratio": 0.2, "queue_depth": 0},
                {"id": 1, "accelerator": "echo", "hash": "h", "busy_ratio": 0.1, "queue_depth": 0}]}],
    })
}

/// Polls `replica` until `path` answers `want`.
fn converges(replica: &Replica, path: &str, want: &Value, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let (status, got, _) = replica.call("GET", path, None);
        if status == 200 && &got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} {path}: {got} instead of {want}",
            replica.base
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn three_replicas_one_leader_failover_keeps_every_binding() {
    let test_start = Instant::now();
    let etcd = Etcd::start();
    let replicas: Vec<Replica> = (0..3).map(|_| Replica::start(&etcd)).collect();
    let all: Vec<&Replica> = replicas.iter().collect();
    let leader = one_leader(&all, Duration::from_secs(10));
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();

    // State written through the leader.
    let lead = &replicas[leader];
    for (name, port) in [("n1", 9000), ("n2", 9100)] {
        let (status, body, _) =
            lead.call("PUT", &format!("/v1/nodes/{name}"), Some(&fake_node(port)));
        assert_eq!(status, 200, "{body}");
    }
    for (function, accelerator, instances) in [("edges", "sobel", 3), ("pings", "echo", 2)] {
        let spec = json!({"accelerator": accelerator, "hash": null,
            "query": {"backend": "cpu", "vendor": null, "node": null}, "instances": instances});
        let (status, body, _) = lead.call("PUT", &format!("/v1/functions/{function}"), Some(&spec));
        assert_eq!(status, 200, "{body}");
    }
    // Every function with its instances' bindings and generations, compared in full
    // after the failover.
    let (_, functions, _) = lead.call("GET", "/v1/functions", None);
    let functions_list = functions.as_array().expect("a list of functions");
    assert_eq!(functions_list.len(), 2, "{functions}");
    let bound = functions_list
        .iter()
        .flat_map(|f| f["instances"].as_array().unwrap().iter())
        .filter(|i| i["node"].is_string())
        .count();
    assert_eq!(bound, 5, "every instance is bound: {functions}");

    // Followers' caches follow the store.
    for &f in &followers {
        converges(
            &replicas[f],
            "/v1/functions",
            &functions,
            Duration::from_secs(5),
        );
    }

    // A write to a follower is refused with the leader's URL (once the follower has
    // read who leads: it polls the election every 200 ms).
    let follower = &replicas[followers[0]];
    let spec = json!({"accelerator": "echo", "hash": null,
        "query": {"backend": null, "vendor": null, "node": null}, "instances": 1});
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, body, location) = follower.call("PUT", "/v1/functions/more", Some(&spec));
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["code"], "NOT_LEADER", "{body}");
        if let Some(location) = location {
            assert_eq!(location, format!("{}/v1/functions/more", lead.base));
            break;
        }
        assert!(Instant::now() < deadline, "no Location");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Reads on a follower work.
    let (status, _, _) = follower.call("GET", "/v1/nodes", None);
    assert_eq!(status, 200);

    // Kill -9 the leader; a follower takes over with everything.
    let mut replicas = replicas;
    let mut dead = replicas.remove(leader);
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    let killed = Instant::now();
    let rest: Vec<&Replica> = replicas.iter().collect();
    let new_leader = one_leader(&rest, Duration::from_secs(10));
    let takeover = killed.elapsed();
    println!("a follower leads {takeover:?} after the leader was killed with SIGKILL");
    assert!(
        takeover < Duration::from_secs(5),
        "took over in {takeover:?}"
    );
    let lead = &replicas[new_leader];
    let (_, after, _) = lead.call("GET", "/v1/functions", None);
    assert_eq!(after, functions, "bindings changed across the failover");

    // The new leader writes; the other replica sends writers to it.
    let (status, body, _) = lead.call("PUT", "/v1/functions/more", Some(&spec));
    assert_eq!(status, 200, "{body}");
    let other = &replicas[1 - new_leader];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, _, location) = other.call("DELETE", "/v1/functions/more", None);
        assert_eq!(status, 503);
        if location.as_deref() == Some(format!("{}/v1/functions/more", lead.base).as_str()) {
            break;
        }
        assert!(Instant::now() < deadline, "Location still {location:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(dead);
    println!("test took {:?}", test_start.elapsed());
}

/// Three replicas with a leader elected, and who leads.
fn three_replicas(etcd: &Etcd) -> (Vec<Replica>, usize) {
    let replicas: Vec<Replica> = (0..3).map(|_| Replica::start(etcd)).collect();
    let all: Vec<&Replica> = replicas.iter().collect();
    let leader = one_leader(&all, Duration::from_secs(10));
    (replicas, leader)
}

/// Issue 29, item 1: after `kill -9` of the leader, the followers must stop sending
/// writers to it long before its election lease runs out (3 s here; etcd deletes the
/// dead leader's key only then): a follower names a leader only while that leader
/// is alive. Before the fix, both followers named the dead leader until the lease ran
/// out, and every client that followed them failed at once.
#[test]
fn followers_stop_naming_a_leader_killed_with_sigkill() {
    let etcd = Etcd::start();
    let (mut replicas, leader) = three_replicas(&etcd);
    let spec = json!({"accelerator": "echo", "instances": 0});
    let dead_base = replicas[leader].base.clone();
    // Both followers name the leader first.
    let deadline = Instant::now() + Duration::from_secs(5);
    for f in (0..3).filter(|&i| i != leader) {
        while replicas[f]
            .call("PUT", "/v1/functions/f", Some(&spec))
            .2
            .is_none()
        {
            assert!(Instant::now() < deadline, "a follower names no leader");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut dead = replicas.remove(leader);
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    let killed = Instant::now();
    // Allowed: one poll of who leads (200 ms) and a margin for a loaded machine. Not
    // allowed: the rest of the lease (at least 2.4 s of the 3 s).
    std::thread::sleep(Duration::from_millis(800));
    while killed.elapsed() < Duration::from_millis(2_200) {
        for r in &replicas {
            let (status, body, location) = r.call("PUT", "/v1/functions/f", Some(&spec));
            if status == 200 {
                continue; // elected already
            }
            assert_eq!(
                (status, &body["code"]),
                (503, &json!("NOT_LEADER")),
                "{body}"
            );
            assert!(
                !location.as_deref().unwrap_or("").starts_with(&dead_base),
                "{:?} after the kill, {} still sends writers to the dead leader: {body}",
                killed.elapsed(),
                r.base
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 29, item 1, the client side: a client that lists every replica outlives the
/// leader. A write sent right after `kill -9` of the leader (which it asks first)
/// waits for the election instead of failing within milliseconds with
/// `503 NOT_LEADER … write to <the dead leader>`.
#[test]
fn a_client_write_outlives_a_leader_killed_with_sigkill() {
    use netaccel_client::registry::RegistryClient;
    let etcd = Etcd::start();
    let (mut replicas, leader) = three_replicas(&etcd);
    // The leader listed first: the client asks it first.
    let mut bases = vec![replicas[leader].base.clone()];
    bases.extend(
        (0..3)
            .filter(|&i| i != leader)
            .map(|i| replicas[i].base.clone()),
    );
    let client = RegistryClient::new(&bases.join(","), None);
    let spec = json!({"accelerator": "echo", "instances": 0});
    client
        .put_function("before", &spec)
        .expect("a write to the leader");
    // Followers know who leads (they poll the election every 200 ms).
    std::thread::sleep(Duration::from_millis(500));

    let mut dead = replicas.remove(leader);
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    let killed = Instant::now();
    let written = client.put_function("after", &spec);
    let took = killed.elapsed();
    let f = written.unwrap_or_else(|e| panic!("the write failed after {took:?}: {e}"));
    assert_eq!(f.name, "after");
    println!("the write went through {took:?} after the leader was killed");
    assert!(
        took < registry_api::leader::ELECTION_WAIT,
        "the write took {took:?}"
    );
    assert_ne!(
        client.base(),
        bases[0],
        "the client now prefers the new leader"
    );
    let functions = client
        .function("before")
        .expect("a read after the failover");
    assert_eq!(functions.name, "before");
}

/// A follower never answers "not found" for what its leader had stored when the
/// request came in: a client that creates something on the leader and reads it back
/// from any replica at once finds it (read-your-writes). Existing things may trail by
/// one refresh; only absence is confirmed against a fresh copy.
#[test]
fn a_follower_finds_what_the_leader_stored_before_the_read() {
    let etcd = Etcd::start();
    let replicas: Vec<Replica> = (0..2).map(|_| Replica::start(&etcd)).collect();
    let all: Vec<&Replica> = replicas.iter().collect();
    let leader = one_leader(&all, Duration::from_secs(10));
    let (lead, follower) = (&replicas[leader], &replicas[1 - leader]);
    let (status, body, _) = lead.call("PUT", "/v1/nodes/n1", Some(&fake_node(9000)));
    assert_eq!(status, 200, "{body}");

    let spec = json!({"accelerator": "echo", "hash": null,
        "query": {"backend": null, "vendor": null, "node": null}, "instances": 0});
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let name = format!("f{i}");
        let (status, body, _) = lead.call("PUT", &format!("/v1/functions/{name}"), Some(&spec));
        assert_eq!(status, 200, "{body}");
        // At once, from the follower: the function is there...
        let asked = Instant::now();
        let (status, body, _) = follower.call("GET", &format!("/v1/functions/{name}"), None);
        assert_eq!(
            status, 200,
            "round {i}: the follower lost the function: {body}"
        );
        slowest = slowest.max(asked.elapsed());
        // ...and so is an instance just created.
        let (status, body, _) = lead.call(
            "POST",
            &format!("/v1/functions/{name}/instances"),
            Some(&json!({})),
        );
        assert_eq!(status, 201, "{body}");
        let id = body["id"].as_str().expect("an instance id").to_string();
        let asked = Instant::now();
        let (status, body, _) =
            follower.call("GET", &format!("/v1/functions/{name}/instances/{id}"), None);
        assert_eq!(
            status, 200,
            "round {i}: the follower lost the instance: {body}"
        );
        slowest = slowest.max(asked.elapsed());
    }
    // What does not exist is still answered 404, after the follower looked again.
    let (status, body, _) = follower.call("GET", "/v1/functions/never", None);
    assert_eq!(
        (status, &body["code"]),
        (404, &json!("NOT_FOUND")),
        "{body}"
    );
    println!("slowest read of a just-written function on the follower: {slowest:?}");
}

/// The store alone: commits are compare-and-set on the revision and need the
/// election key (the fence) to exist.
#[test]
fn etcd_store_refuses_stale_and_unfenced_writers() {
    use netaccel_registry::etcd::EtcdStore;
    use netaccel_registry::model::Meta;
    use netaccel_registry::store::{Change, Store, StoreError};

    let etcd = Etcd::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let endpoints = vec![format!("http://{}", etcd.client)];
        let store = EtcdStore::connect(endpoints, "t/".to_string())
            .await
            .unwrap();
        let empty = store.load().await.unwrap();
        assert_eq!(empty.revision, 0);
        let meta = |n| [Change::PutMeta(Meta { next_instance: n })];
        // No fence: not the leader.
        assert!(matches!(
            store.commit(0, &meta(1)).await,
            Err(StoreError::Unavailable(_))
        ));
        let mut client = store.client();
        let fence = store.key("election/me");
        client.put(fence.as_str(), "x", None).await.unwrap();
        store.set_fence(Some(fence.clone().into_bytes()));
        let r1 = store.commit(0, &meta(1)).await.unwrap();
        assert!(r1 > 0);
        let snap = store.load().await.unwrap();
        assert_eq!((snap.revision, snap.meta.next_instance), (r1, 1));
        // A writer still at revision 0 lost the race.
        assert_eq!(
            store.commit(0, &meta(2)).await,
            Err(StoreError::Conflict {
                expected: 0,
                actual: r1
            })
        );
        // Two changes of one key in one transaction: the last counts.
        let twice = [
            Change::PutMeta(Meta { next_instance: 3 }),
            Change::PutMeta(Meta { next_instance: 4 }),
        ];
        let r2 = store.commit(r1, &twice).await.unwrap();
        assert_eq!(store.load().await.unwrap().meta.next_instance, 4);
        // The fence key gone (the lease ended): refused, though the revision matches.
        client.delete(fence.as_str(), None).await.unwrap();
        assert!(matches!(
            store.commit(r2, &meta(5)).await,
            Err(StoreError::Unavailable(_))
        ));
        assert_eq!(store.load().await.unwrap().meta.next_instance, 4);
    });
}

/// Found by bench/jepsen (docs/jepsen.md): a leader paused (SIGSTOP) longer than its
/// election lease answered reads from its old cache once it resumed, as if it still
/// led — here, a function another replica had deleted meanwhile was still there.
/// From the moment it resumes it must answer nothing stale: `503` until it has a
/// fresh copy, then what the store holds.
#[test]
fn a_leader_paused_past_its_lease_answers_nothing_stale() {
    let etcd = Etcd::start();
    let (replicas, leader) = three_replicas(&etcd);
    let old = &replicas[leader];
    let spec = json!({"accelerator": "echo", "instances": 0});
    let (status, body, _) = old.call("PUT", "/v1/functions/gone", Some(&spec));
    assert_eq!(status, 200, "{body}");

    let pid = old.child.id() as libc::pid_t;
    // SAFETY: kill has no memory preconditions; pid is our own child, not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let others: Vec<&Replica> = (0..3)
        .filter(|&i| i != leader)
        .map(|i| &replicas[i])
        .collect();
    let new = others[one_leader(&others, Duration::from_secs(15))];
    let (status, body, _) = new.call("DELETE", "/v1/functions/gone", None);
    assert_eq!(status, 204, "{body}");

    // Reads sent while it is stopped wait in its listen queue: it answers them the
    // moment it resumes, before it could have learnt it no longer leads.
    let waiting: Vec<_> = (0..8)
        .map(|_| {
            let base = old.base.clone();
            std::thread::spawn(move || {
                let (status, body, _) = call(&base, "GET", "/v1/functions/gone", None);
                (status, body)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let resumed = Instant::now();
    for reader in waiting {
        let (status, body) = reader.join().unwrap();
        assert!(
            status == 404 || (status == 503 && body["code"] == "UNAVAILABLE"),
            "the resumed old leader answered {status} {body}"
        );
    }
    while resumed.elapsed() < Duration::from_secs(3) {
        let (status, body, _) = old.call("GET", "/v1/functions/gone", None);
        assert!(
            status == 404 || (status == 503 && body["code"] == "UNAVAILABLE"),
            "{:?} after it resumed, the old leader answered {status} {body}",
            resumed.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // By now it follows, with a fresh copy.
    let (status, body, _) = old.call("GET", "/v1/functions/gone", None);
    assert_eq!(
        (status, &body["code"]),
        (404, &json!("NOT_FOUND")),
        "{body}"
    );
}

/// The Registry's store as the test sees it: the etcd store, whose loads the test can
/// make fail (the replica's reloads then cannot bring its cache up to date).
struct LoadsFailOnDemand {
    inner: std::sync::Arc<netaccel_registry::etcd::EtcdStore>,
    fail: std::sync::atomic::AtomicBool,
}

impl netaccel_registry::store::Store for LoadsFailOnDemand {
    fn load(
        &self,
    ) -> futures_util::future::BoxFuture<
        '_,
        Result<netaccel_registry::store::Snapshot, netaccel_registry::store::StoreError>,
    > {
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Box::pin(std::future::ready(Err(
                netaccel_registry::store::StoreError::Unavailable("loads fail (the test)".into()),
            )));
        }
        self.inner.load()
    }

    fn commit<'a>(
        &'a self,
        expected: netaccel_registry::store::Revision,
        changes: &'a [netaccel_registry::store::Change],
    ) -> futures_util::future::BoxFuture<
        'a,
        Result<netaccel_registry::store::Revision, netaccel_registry::store::StoreError>,
    > {
        self.inner.commit(expected, changes)
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// Found by bench/jepsen (docs/jepsen.md, anomaly 2): a leader that gives up its
/// election lease while it is still valid (its keep-alive failed, as when the etcd
/// member it talks to is killed) used to revoke the lease first and stop leading
/// after, and then to answer reads from its cache as a follower until a reload came:
/// another replica led and wrote meanwhile, and reads went back in time. Here the
/// lease ends at a moment the test chooses (it revokes it), the next leader (the test,
/// on the store) deletes a function, and the old leader's reloads fail: from the
/// moment it stops leading until it has a fresh copy, it must answer nothing from its
/// cache — neither the deleted function nor a `200`.
#[test]
fn a_leader_that_gives_up_its_lease_answers_no_stale_read() {
    use netaccel_registry::etcd::{EtcdStore, ELECTION};
    use netaccel_registry::store::{Change, Store};
    use netaccel_registry::{Config, Registry};
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    struct Agree;
    impl netaccel_registry::nodeadmin::NodeAdmin for Agree {
        fn reconfigure(
            &self,
            _: std::net::SocketAddr,
            _: u16,
            _: &str,
        ) -> futures_util::future::BoxFuture<'static, Result<(), String>> {
            Box::pin(std::future::ready(Ok(())))
        }
    }

    let etcd = Etcd::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let endpoints = vec![format!("http://{}", etcd.client)];
        let prefix = "stale/".to_string();
        let etcd_store = Arc::new(
            EtcdStore::connect(endpoints.clone(), prefix.clone())
                .await
                .unwrap(),
        );
        let store = Arc::new(LoadsFailOnDemand {
            inner: etcd_store.clone(),
            fail: false.into(),
        });
        let reg = Registry::new_follower(Config::default(), store.clone(), Arc::new(Agree))
            .await
            .unwrap();
        // A long election lease: the old leader's last renewal stays valid for seconds
        // after the lease is revoked, which is when it used to answer from its cache.
        let ttl = Duration::from_secs(10);
        netaccel_registry::ha::spawn(
            reg.clone(),
            etcd_store.clone(),
            "http://127.0.0.1:9".into(),
            ttl,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while !reg.is_leader() || reg.cache_unconfirmed() {
            assert!(Instant::now() < deadline, "the replica did not lead");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let spec = serde_json::from_value(json!({"accelerator": "echo", "instances": 0})).unwrap();
        reg.put_function("gone", &spec).await.unwrap();

        // The fault: from now on its reloads fail, and its lease ends.
        store.fail.store(true, Ordering::SeqCst);
        let mut client = etcd_store.client();
        let lease = client
            .leader(etcd_store.key(ELECTION))
            .await
            .unwrap()
            .kv()
            .expect("a leader")
            .lease();
        client.lease_revoke(lease).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while reg.is_leader() {
            assert!(
                Instant::now() < deadline,
                "the old leader did not give up its lease"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The next leader (the test, fenced by a key of its own) deletes the function.
        let next = EtcdStore::connect(endpoints, prefix).await.unwrap();
        let fence = next.key("election/next");
        client.put(fence.as_str(), "next", None).await.unwrap();
        next.set_fence(Some(fence.into_bytes()));
        let revision = next.load().await.unwrap().revision;
        next.commit(revision, &[Change::DeleteFunction("gone".into())])
            .await
            .unwrap();

        // What the old leader answers, as its HTTP guard decides: nothing while its
        // cache is unconfirmed, else from the cache.
        let watched = Instant::now();
        while watched.elapsed() < Duration::from_secs(2) {
            assert!(!reg.is_leader(), "it led again without a fresh copy");
            if !reg.cache_unconfirmed() {
                let read = reg.function_json("gone").await;
                assert!(
                    read.is_err(),
                    "{:?} after the next leader deleted it, the old leader read back {read:?}",
                    watched.elapsed()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Its reloads work again: it answers, and what the store holds.
        store.fail.store(false, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        while reg.cache_unconfirmed() {
            assert!(
                Instant::now() < deadline,
                "no fresh copy after the store came back"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let read = reg.function_json("gone").await;
        assert_eq!(read.map_err(|e| e.status), Err(404));
    });
}
