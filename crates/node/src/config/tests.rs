use super::*;

#[test]
fn defaults_are_valid() {
    Config::default().validate().unwrap();
    let c = Config::from_toml("").unwrap();
    assert_eq!(c.http.port(), 8080);
}

#[test]
fn toml_sets_slots_and_bounds() {
    let c = Config::from_toml(
        r#"
        http = "127.0.0.1:9999"
        queue_depth_max = 8
        balance = "round_robin"
        slot_worker_policy = "normal"
        admin_token = "s3cret"
        [[slots]]
        accelerator = "topk"
        [[slots]]
        accelerator = "topk"
        "#,
    )
    .unwrap();
    assert_eq!(c.queue_depth_max, 8);
    assert_eq!(c.balance, BalancePolicy::RoundRobin);
    assert_eq!(c.slot_worker_policy, WorkerPolicy::Normal);
    assert_eq!(Config::default().slot_worker_policy, WorkerPolicy::Idle);
    assert!(Config::from_toml("slot_worker_policy = \"fifo\"").is_err());
    assert_eq!(c.slots.len(), 2);
    assert_eq!(c.admin_token.as_deref(), Some("s3cret"));
    assert_eq!(c.repository_index, RepositoryIndex::Catalog);
    let models = Config::from_toml("repository_index = \"models\"").unwrap();
    assert_eq!(models.repository_index, RepositoryIndex::Models);
    assert!(Config::from_toml("repository_index = \"all\"").is_err());
}

#[test]
fn grpc_is_an_address_or_off() {
    assert_eq!(Config::from_toml("").unwrap().grpc, Some(GRPC_DEFAULT));
    let c = Config::from_toml("grpc = \"127.0.0.1:0\"").unwrap();
    assert_eq!(c.grpc, Some("127.0.0.1:0".parse().unwrap()));
    assert_eq!(Config::from_toml("grpc = \"off\"").unwrap().grpc, None);
    let e = Config::from_toml("grpc = \"nowhere\"").unwrap_err();
    assert!(e.contains("neither an address"), "{e}");
    // What the node reports as its configuration reads back the same.
    let off = Config {
        grpc: None,
        ..Config::default()
    };
    let text = toml::to_string(&off).unwrap();
    assert!(text.lines().any(|l| l == "grpc = \"off\""), "{text}");
}

#[test]
fn simulated_device_time_is_read_and_bounded() {
    let c =
        Config::from_toml("simulated_exec_us = 1000\nslot_worker_policy = \"inherit\"").unwrap();
    assert_eq!(c.simulated_exec_us, 1000);
    assert_eq!(c.slot_worker_policy, WorkerPolicy::Inherit);
    assert_eq!(Config::default().simulated_exec_us, 0);
    let e = Config::from_toml("simulated_exec_us = 10000001").unwrap_err();
    assert!(e.contains("simulated_exec_us must be at most"), "{e}");
}

#[test]
fn typos_and_bad_relations_are_errors() {
    assert!(Config::from_toml("queue_depth = 3")
        .unwrap_err()
        .contains("unknown field"));
    assert!(Config::from_toml("queue_depth_max = 0")
        .unwrap_err()
        .contains("at least 1"));
    assert!(Config::from_toml("body_bytes_max = 10\nbody_memory_bytes_max = 5").is_err());
}

#[test]
fn opencl_bounds_come_from_the_file_and_default_to_the_service_defaults() {
    let defaults = Config::default().opencl.service();
    let service = ocl_remote::service::ServiceConfig::default();
    assert_eq!(defaults.buffer_bytes_max, service.buffer_bytes_max);
    assert_eq!(defaults.send_stall_max, service.send_stall_max);
    assert_eq!(defaults.poll_before_sleep, service.poll_before_sleep);
    assert_eq!(defaults.frame_body_max, service.frame_body_max);
    let c = Config::from_toml(
        r#"
        opencl = "127.0.0.1:9500"
        opencl_buffer_bytes_max = 4294967296
        opencl_clients_max = 3
        opencl_objects_max = 100
        opencl_pending_bytes_max = 1073741824
        opencl_frame_body_bytes_max = 33554432
        opencl_device_queue_depth_max = 7
        opencl_send_stall_timeout_ms = 0
        opencl_program_cache_entries_max = 0
        opencl_program_cache_bytes_max = 1024
        opencl_kernel_name_bytes_max = 100
        opencl_shared_memory = false
        opencl_local_socket = false
        opencl_poll_us = 0
        opencl_library = "libOpenCL.so"
        opencl_body_spare_bytes_max = 0
        "#,
    )
    .unwrap()
    .opencl
    .service();
    assert_eq!(c.buffer_bytes_max, 4 << 30);
    assert_eq!((c.clients_max, c.objects_max), (3, 100));
    assert_eq!(c.pending_bytes_max, 1 << 30);
    assert_eq!(c.frame_body_max, 32 << 20);
    assert_eq!(c.device_queue_depth_max, 7);
    assert!(c.send_stall_max.is_zero() && c.poll_before_sleep.is_zero());
    assert_eq!(
        (c.program_cache_entries_max, c.program_cache_bytes_max),
        (0, 1024)
    );
    assert_eq!(c.kernel_name_bytes_max, 100);
    assert!(!c.shared_memory && !c.local_socket);
    assert_eq!(c.library, "libOpenCL.so");
    assert_eq!(c.body_spare_bytes_max, 0);
}

#[test]
fn the_opencl_section_and_the_flat_keys_of_earlier_releases_read_the_same() {
    let section = Config::from_toml(
        "[opencl]\nlisten = \"127.0.0.1:9500\"\nclients_max = 3\nisolation = \"shared\"\n",
    )
    .unwrap();
    let flat = Config::from_toml(
        "opencl = \"127.0.0.1:9500\"\nopencl_clients_max = 3\nopencl_isolation = \"shared\"\n",
    )
    .unwrap();
    assert!(section.deprecated.is_empty());
    assert_eq!(
        section.opencl.listen,
        Some("127.0.0.1:9500".parse().unwrap())
    );
    assert_eq!(
        toml::to_string(&section.opencl).unwrap(),
        toml::to_string(&flat.opencl).unwrap()
    );
    assert_eq!(flat.deprecated.len(), 3, "{:?}", flat.deprecated);
    assert!(flat.deprecated.iter().any(|s| s
        .contains("`opencl_clients_max` is deprecated: write `clients_max = …` under `[opencl]`")));
    assert!(flat
        .deprecated
        .iter()
        .any(|s| s.contains("`opencl` is deprecated: write `listen = …`")));
    // A flat key beside an `[opencl]` table is moved into it.
    let mixed = Config::from_toml("opencl_clients_max = 4\n[opencl]\nobjects_max = 9\n").unwrap();
    assert_eq!((mixed.opencl.clients_max, mixed.opencl.objects_max), (4, 9));
    assert_eq!(mixed.opencl.listen, None);
}

#[test]
fn an_opencl_setting_given_both_ways_is_refused_and_errors_name_keys_as_written() {
    let err = Config::from_toml("opencl_clients_max = 4\n[opencl]\nclients_max = 5\n").unwrap_err();
    assert!(
        err.contains("`opencl_clients_max` and `[opencl] clients_max` are the same setting"),
        "{err}"
    );
    let err = Config::from_toml("[opencl]\nclients_max = 0\n").unwrap_err();
    assert_eq!(err, "[opencl] clients_max must be at least 1");
    let err = Config::from_toml("[opencl]\nclient_max = 1\n").unwrap_err();
    assert!(err.contains("unknown field `client_max`"), "{err}");
}

#[test]
fn without_buffer_bytes_max_remote_opencl_clients_see_the_devices_own_memory() {
    // Issue 29: a default quota of 1 GiB was presented as the device's memory and
    // hashcat refused to run; a quota is now the operator's choice.
    let unset = Config::default().opencl.service();
    assert_eq!(
        unset.buffer_bytes_max,
        ocl_remote::service::ServiceConfig::NO_QUOTA
    );
    let set = Config::from_toml("[opencl]\nbuffer_bytes_max = 1073741824\n").unwrap();
    assert_eq!(set.opencl.service().buffer_bytes_max, 1 << 30);
    // Written back, an unset quota stays unset.
    let written = toml::to_string(&Config::default().opencl).unwrap();
    assert!(!written.contains("buffer_bytes_max"), "{written}");
    let read = Config::from_toml(&format!("[opencl]\n{written}")).unwrap();
    assert_eq!(read.opencl.buffer_bytes_max, None);
}

#[test]
fn opencl_bounds_are_checked() {
    for (toml, error) in [
        (
            "opencl_clients_max = 0",
            "opencl_clients_max must be at least 1",
        ),
        (
            "opencl_buffer_bytes_max = 0",
            "opencl_buffer_bytes_max must be at least 1",
        ),
        (
            "opencl_frame_body_bytes_max = 1024",
            "opencl_frame_body_bytes_max must be at least",
        ),
        (
            "opencl_pending_bytes_max = 1048576",
            "opencl_pending_bytes_max (1048576) must be at least",
        ),
        ("opencl_poll_us = 20000", "opencl_poll_us must be at most"),
        ("opencl_library = \"\"", "opencl_library must name"),
        ("opencl_buffer_max = 5", "unknown field"),
    ] {
        let err = Config::from_toml(toml).unwrap_err();
        assert!(err.contains(error), "{toml}: {err}");
    }
}

/// Keys whose 0 has a meaning of its own, given in their documentation (off, no
/// bound, one per core, …); every other numeric key's 0 is refused.
const ZERO_MEANS_SOMETHING: [&str; 16] = [
    "io_threads",
    "queue_wait_factor",
    "queue_wait_floor_us",
    "inline_work_max",
    "hand_over_wait_us",
    "slot_worker_nice",
    "reconfig_delay_ms",
    "simulated_exec_us",
    "kernel_timeout_ms",
    "tls.session_cache_max",
    "opencl.send_stall_timeout_ms",
    "opencl.program_cache_entries_max",
    "opencl.program_cache_bytes_max",
    "opencl.poll_us",
    "opencl.body_spare_bytes_max",
    "opencl.kernel_time_ms",
];

#[test]
fn every_numeric_key_has_a_minimum_and_a_zero_is_refused_unless_it_means_something() {
    // Issue 29: `body_bytes_max = 0` was accepted (every POST then got 413) while
    // `connections_max = 0` was refused.
    let defaults = toml::Table::try_from(Config::default()).unwrap();
    let mut numeric = Vec::new();
    for (key, value) in &defaults {
        match value {
            toml::Value::Integer(_) => numeric.push((None, key.clone())),
            toml::Value::Table(section) => numeric.extend(
                section
                    .iter()
                    .filter(|(_, v)| v.is_integer())
                    .map(|(k, _)| (Some(key.clone()), k.clone())),
            ),
            _ => {}
        }
    }
    assert!(numeric.len() > 40, "{numeric:?}");
    for (section, key) in numeric {
        let (name, toml) = match &section {
            None => (key.clone(), format!("{key} = 0\n")),
            Some(s) => (format!("{s}.{key}"), format!("[{s}]\n{key} = 0\n")),
        };
        let result = Config::from_toml(&toml);
        if ZERO_MEANS_SOMETHING.contains(&name.as_str()) {
            assert!(result.is_ok(), "{name} = 0: {:?}", result.err());
        } else {
            let err = result
                .err()
                .unwrap_or_else(|| panic!("{name} = 0 is accepted"));
            assert!(err.contains("must be at least"), "{name} = 0: {err}");
        }
    }
}

#[test]
fn log_format_is_text_or_json() {
    assert_eq!(Config::default().log_format, LogFormat::Text);
    let c = Config::from_toml("log_format = \"json\"").unwrap();
    assert_eq!(c.log_format, LogFormat::Json);
    assert!(Config::from_toml("log_format = \"xml\"").is_err());
}

#[test]
fn an_invalid_log_level_is_refused() {
    let err = Config::from_toml("log_level = \"verbose\"").unwrap_err();
    assert!(err.contains("error, warn, info, debug, trace"), "{err}");
    let c = Config::from_toml("log_level = \"info,netaccel_node=debug\"").unwrap();
    assert_eq!(c.log_level, "info,netaccel_node=debug");
}

#[test]
fn an_empty_admin_token_is_refused() {
    let err = Config::from_toml("admin_token = \"\"").unwrap_err();
    assert!(err.contains("admin_token is empty"), "{err}");
    let err = Config::from_toml("admin_token = \"two words\"").unwrap_err();
    assert!(err.contains("admin_token must not contain spaces"), "{err}");
    let c = Config::from_toml("admin_token = \"s3cret\"").unwrap();
    assert_eq!(c.admin_token.as_deref(), Some("s3cret"));
    assert_eq!(Config::from_toml("").unwrap().admin_token, None);
}

#[test]
fn devices_follow_the_manifest_spec() {
    let c = Config::from_toml(
        r#"
        accelerators_dir = "accel.d"
        [[devices]]
        name = "cpu0"
        backend = "cpu"
        slots = ["to_uppercase", "topk"]

        [[devices]]
        name = "ocl0"
        backend = "opencl"
        platform = "Portable Computing Language"
        device = 0
        slots = ["sobel", "xorbytes"]

        [[devices]]
        name = "ocl1"
        backend = "opencl"
        platform = 1
        slots = ["echo"]

        [[devices]]
        name = "rtl0"
        backend = "rtl"
        clock_mhz = 250
        icap_bytes_per_s = 400000000
        slots = ["topk", "xorbytes"]
        "#,
    )
    .unwrap();
    let d = c.device_list();
    assert_eq!(d.len(), 4);
    assert_eq!((d[0].backend, d[0].slots.len()), (BackendKind::Cpu, 2));
    assert_eq!(
        d[1].platform,
        Some(PlatformChoice::Name("Portable Computing Language".into()))
    );
    assert_eq!(
        (d[1].device, d[2].platform.clone()),
        (Some(0), Some(PlatformChoice::Index(1)))
    );
    assert_eq!(
        (d[3].clock_mhz(), d[3].icap_bytes_per_s()),
        (250.0, 400_000_000)
    );
    assert_eq!(
        c.accelerators_dir.as_deref(),
        Some(std::path::Path::new("accel.d"))
    );
    // Without [[devices]]: one CPU device with [[slots]].
    let c = Config::from_toml("[[slots]]\naccelerator = \"echo\"").unwrap();
    let d = c.device_list();
    assert_eq!(
        (d[0].name.as_str(), d[0].backend, d[0].slots.clone()),
        ("cpu0", BackendKind::Cpu, vec!["echo".to_string()])
    );
}

#[test]
fn bad_devices_are_refused_with_a_reason() {
    let dev = |body: &str| Config::from_toml(&format!("[[devices]]\n{body}")).unwrap_err();
    for (body, error) in [
        ("name = \"a\"\nbackend = \"gpu\"\nslots = [\"echo\"]", "unknown variant `gpu`"),
        ("name = \"a\"\nbackend = \"cpu\"\nslots = []", "slots = [] configures no slot"),
        ("name = \"a\"\nbackend = \"cpu\"\nplatform = 0\nslots = [\"echo\"]", "`platform` is for opencl devices"),
        ("name = \"a\"\nbackend = \"opencl\"\nclock_mhz = 100\nslots = [\"echo\"]", "`clock_mhz` is for rtl devices"),
        ("name = \"a\"\nbackend = \"rtl\"\ndevice = 0\nslots = [\"echo\"]", "`device` is for opencl"),
        ("name = \"a\"\nbackend = \"rtl\"\nclock_mhz = 0\nslots = [\"echo\"]", "clock_mhz must be within"),
        ("name = \"a\"\nbackend = \"rtl\"\nicap_bytes_per_s = 0\nslots = [\"echo\"]", "icap_bytes_per_s must be at least 1"),
        ("name = \"a\"\nbackend = \"cpu\"\nbackpressure = 0.5\nslots = [\"echo\"]", "`backpressure` is for rtl devices"),
        ("name = \"a\"\nbackend = \"opencl\"\nbackpressure_seed = 1\nslots = [\"echo\"]", "`backpressure_seed` is for rtl"),
        ("name = \"a\"\nbackend = \"rtl\"\nbackpressure = 1.0\nslots = [\"echo\"]", "backpressure must be within [0, 1)"),
        ("name = \"a\"\nbackend = \"rtl\"\nbackpressure = -0.1\nslots = [\"echo\"]", "backpressure must be within [0, 1)"),
        ("name = \"A b\"\nbackend = \"cpu\"\nslots = [\"echo\"]", "must be 1 to 32 characters"),
        ("name = \"a\"\nbackend = \"opencl\"\nplatform = \"\"\nslots = [\"echo\"]", "matches every platform"),
        ("name = \"a\"\nbackend = \"cpu\"\nslot = [\"echo\"]", "unknown field `slot`"),
        ("name = \"a\"\nbackend = \"cpu\"\nslots = [\"echo\"]\n[[devices]]\nname = \"a\"\nbackend = \"cpu\"\nslots = [\"echo\"]", "two devices are named a"),
    ] {
        let err = dev(body);
        assert!(err.contains(error), "{body}: {err}");
    }
    let err = Config::from_toml(
        "[[slots]]\naccelerator = \"echo\"\n[[devices]]\nname = \"a\"\nbackend = \"cpu\"\nslots = [\"echo\"]",
    )
    .unwrap_err();
    assert!(err.contains("not both"), "{err}");
}

#[test]
fn an_empty_slot_list_is_refused_and_a_missing_one_means_the_default() {
    let err = Config::from_toml("slots = []").unwrap_err();
    assert!(err.contains("slots = [] configures no slot"), "{err}");
    assert!(Config::from_toml("").unwrap().slots.is_empty());
    let c = Config::from_toml("[[slots]]\naccelerator = \"echo\"").unwrap();
    assert_eq!(c.slots.len(), 1);
}
