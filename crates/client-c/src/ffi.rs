//! The C ABI: every `extern "C"` function of netaccel.h, converting C arguments to the
//! Rust types of this crate and failures to `CError`. The contract of each
//! function (ownership, NULL, threads) is written once, in netaccel.h.

use std::ffi::{c_char, c_int, CStr};
use std::ptr;
use std::time::Duration;

use netaccel_client::registry::{Bound, BoundError, BoundOptions, RegistryClient, Via};
use netaccel_client::ClientError;
use rac_proto::Status;

use crate::{call_by_name, kind, parse_params, Call, Connection, Failure, Options};

/// `CError`: what a failed function reports.
#[repr(C)]
pub struct CError {
    pub kind: c_int,
    pub status: u16,
    pub retry_after_ms: u32,
    pub message: [c_char; 256],
}

/// `CBuffer`: an output the library allocated; `netaccel_buffer_free` frees it.
#[repr(C)]
pub struct CBuffer {
    pub data: *mut u8,
    pub len: usize,
}

/// `COptions`: how to connect (all pointers may be NULL).
#[repr(C)]
pub struct COptions {
    pub tls_ca: *const c_char,
    pub cert: *const c_char,
    pub key: *const c_char,
    pub tenant: *const c_char,
    pub token: *const c_char,
    pub in_flight_max: u32,
}

/// `netaccel_client`: an opaque connection.
pub struct ClientHandle(Connection);

/// `netaccel_bound`: an opaque instance of a function bound through the registry.
pub struct BoundHandle(Bound);

unsafe fn report(err: *mut CError, f: &Failure) -> c_int {
    if let Some(e) = err.as_mut() {
        e.kind = f.kind;
        e.status = f.status;
        e.retry_after_ms = f.retry_after_ms;
        let mut n = f.message.len().min(e.message.len() - 1);
        while !f.message.is_char_boundary(n) {
            n -= 1;
        }
        for (dst, src) in e.message.iter_mut().zip(&f.message.as_bytes()[..n]) {
            *dst = *src as c_char;
        }
        e.message[n] = 0;
    }
    f.kind
}

unsafe fn clear(err: *mut CError) -> c_int {
    if let Some(e) = err.as_mut() {
        e.kind = kind::OK;
        e.status = 0;
        e.retry_after_ms = 0;
        e.message[0] = 0;
    }
    kind::OK
}

unsafe fn text(p: *const c_char, what: &str) -> Result<Option<String>, Failure> {
    if p.is_null() {
        return Ok(None);
    }
    CStr::from_ptr(p)
        .to_str()
        .map(|s| Some(s.to_string()))
        .map_err(|_| Failure::new(kind::INVALID, format!("{what} is not UTF-8")))
}

unsafe fn required(p: *const c_char, what: &str) -> Result<String, Failure> {
    text(p, what)?.ok_or_else(|| Failure::new(kind::INVALID, format!("{what} is NULL")))
}

unsafe fn bytes(p: *const u8, len: usize) -> Result<Vec<u8>, Failure> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(Failure::new(
            kind::INVALID,
            "payload is NULL with a non-zero length",
        ));
    }
    Ok(std::slice::from_raw_parts(p, len).to_vec())
}

unsafe fn options(o: *const COptions) -> Result<Options, Failure> {
    let Some(o) = o.as_ref() else {
        return Ok(Options::default());
    };
    Ok(Options {
        tls_ca: text(o.tls_ca, "tls_ca")?,
        cert: text(o.cert, "cert")?,
        key: text(o.key, "key")?,
        tenant: text(o.tenant, "tenant")?,
        token: text(o.token, "token")?,
        in_flight_max: o.in_flight_max,
    })
}

unsafe fn give(out: *mut CBuffer, data: Vec<u8>) {
    if let Some(out) = out.as_mut() {
        let boxed = data.into_boxed_slice();
        out.len = boxed.len();
        out.data = Box::into_raw(boxed) as *mut u8;
    }
}

unsafe fn named_call(
    accelerator: *const c_char,
    params: *const c_char,
    payload: *const u8,
    len: usize,
    deadline_us: u32,
) -> Result<Call, Failure> {
    let name = required(accelerator, "accelerator")?;
    let params = text(params, "params")?.unwrap_or_default();
    call_by_name(&name, &params, bytes(payload, len)?, deadline_us)
}

#[no_mangle]
pub unsafe extern "C" fn netaccel_connect(
    addr: *const c_char,
    opts: *const COptions,
    err: *mut CError,
) -> *mut ClientHandle {
    let made = required(addr, "addr").and_then(|a| Connection::connect(&a, &options(opts)?));
    match made {
        Ok(c) => {
            clear(err);
            Box::into_raw(Box::new(ClientHandle(c)))
        }
        Err(f) => {
            report(err, &f);
            ptr::null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn netaccel_close(client: *mut ClientHandle) {
    if !client.is_null() {
        drop(Box::from_raw(client));
    }
}

unsafe fn finish(out_buf: *mut CBuffer, err: *mut CError, r: Result<Vec<u8>, Failure>) -> c_int {
    match r {
        Ok(data) => {
            give(out_buf, data);
            clear(err)
        }
        Err(f) => report(err, &f),
    }
}

#[no_mangle]
pub unsafe extern "C" fn netaccel_call(
    client: *mut ClientHandle,
    accelerator: *const c_char,
    params: *const c_char,
    payload: *const u8,
    len: usize,
    deadline_us: u32,
    out: *mut CBuffer,
    err: *mut CError,
) -> c_int {
    let Some(c) = client.as_mut() else {
        return report(err, &Failure::new(kind::INVALID, "client is NULL"));
    };
    let r =
        named_call(accelerator, params, payload, len, deadline_us).and_then(|call| c.0.call(call));
    finish(out, err, r)
}

unsafe fn id_call(
    accel_id: u16,
    params: *const u8,
    payload: *const u8,
    len: usize,
    deadline_us: u32,
) -> Result<Call, Failure> {
    let mut block = [0u8; rac_proto::PARAMS_LEN];
    if !params.is_null() {
        block.copy_from_slice(std::slice::from_raw_parts(params, rac_proto::PARAMS_LEN));
    }
    Ok(Call {
        accel_id,
        params: block,
        payload: bytes(payload, len)?,
        deadline_us,
    })
}

#[no_mangle]
pub unsafe extern "C" fn netaccel_call_id(
    client: *mut ClientHandle,
    accel_id: u16,
    params: *const u8,
    payload: *const u8,
    len: usize,
    deadline_us: u32,
    out: *mut CBuffer,
    err: *mut CError,
) -> c_int {
    let Some(c) = client.as_mut() else {
        return report(err, &Failure::new(kind::INVALID, "client is NULL"));
    };
    let r = id_call(accel_id, params, payload, len, deadline_us).and_then(|call| c.0.call(call));
    finish(out, err, r)
}

unsafe fn submitted(ticket: *mut u64, err: *mut CError, r: Result<u64, Failure>) -> c_int {
    match r {
        Ok(t) => {
            if let Some(ticket) = ticket.as_mut() {
                *ticket = t;
            }
            clear(err)
        }
        Err(f) => report(err, &f),
    }
}

#[no_mangle]
pub unsafe extern "C" fn netaccel_submit(
    client: *mut ClientHandle,
    accelerator: *const c_char,
    params: *const c_char,
    payload: *const u8,
    len: usize,
    deadline_us: u32,
    ticket: *mut u64,
    err: *mut CError,
) -> c_int {
    let Some(c) = client.as_mut() else {
        return report(err, &Failure::new(kind::INVALID, "client is NULL"));
    };
    let r = named_call(accelerator, params, payload, len, deadline_us)
        .and_then(|call| c.0.submit(call));
    submitted(ticket, err, r)
}

#[no_mangle]
pub unsafe extern "C" fn netaccel_submit_id(
    client: *mut ClientHandle,
    accel_id: u16,
    params: *const u8,
    payload: *const u8,
    len: usize,
    deadline_us: u32,
    ticket: *mut u64,
    err: *mut CError,
) -> c_int {
    let Some(c) = client.as_mut() else {
        return report(err, &Failure::new(kind::INVALID, "client is NULL"));
    };
    let r = id_call(accel_id, params, payload, len, deadline_us).and_then(|call| c.0.submit(call));
    submitted(ticket, err, r)
}

#[no_mangle]
pub unsafe extern "C" fn netaccel_poll(
    client: *mut ClientHandle,
    wait_ms: i64,
    ticket: *mut u64,
    out: *mut CBuffer,
    err: *mut CError,
) -> c_int {
    let Some(c) = client.as_mut() else {
        return report(err, &Failure::new(kind::INVALID, "client is NULL"));
    };
    match c.0.poll(wait_ms) {
        None => report(err, &Failure::new(kind::NONE, "no result within the wait")),
        Some((t, r)) => {
            if let Some(ticket) = ticket.as_mut() {
                *ticket = t;
            }
            finish(out, err, r)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn netaccel_in_flight(client: *const ClientHandle) -> u32 {
    client.as_ref().map_or(0, |c| c.0.in_flight())
}

#[no_mangle]
pub unsafe extern "C" fn netaccel_buffer_free(buf: *mut CBuffer) {
    if let Some(b) = buf.as_mut() {
        if !b.data.is_null() {
            drop(Box::from_raw(ptr::slice_from_raw_parts_mut(b.data, b.len)));
        }
        b.data = ptr::null_mut();
        b.len = 0;
    }
}

#[no_mangle]
pub extern "C" fn netaccel_kind_name(kind: c_int) -> *const c_char {
    const NAMES: [&CStr; 16] = [
        c"ok",
        c"bad_request",
        c"unknown_accelerator",
        c"busy",
        c"too_large",
        c"deadline",
        c"unavailable",
        c"unauthorized",
        c"internal",
        c"protocol",
        c"closed",
        c"connect",
        c"registry",
        c"full",
        c"none",
        c"invalid",
    ];
    debug_assert!(NAMES
        .iter()
        .zip(kind::NAMES)
        .all(|(c, s)| c.to_bytes() == s.as_bytes()));
    usize::try_from(kind)
        .ok()
        .and_then(|k| NAMES.get(k))
        .map_or(c"unknown".as_ptr(), |c| c.as_ptr())
}

fn bound_failure(e: &BoundError) -> Failure {
    match e {
        BoundError::Call {
            error: ClientError::Node { code, message, .. },
            ..
        } => match Status::from_name(code) {
            Some(s) if s != Status::Ok => Failure::from_status(s, message),
            _ => Failure::new(kind::INTERNAL, e.to_string()),
        },
        BoundError::Call { .. } => Failure::new(kind::CLOSED, e.to_string()),
        BoundError::NoBinding { .. } => Failure {
            retry_after_ms: crate::RETRY_AFTER_MS,
            ..Failure::new(kind::UNAVAILABLE, e.to_string())
        },
        BoundError::Registry(_) => Failure::new(kind::REGISTRY, e.to_string()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn netaccel_bind(
    registry: *const c_char,
    function: *const c_char,
    token: *const c_char,
    rebind_wait_ms: u32,
    err: *mut CError,
) -> *mut BoundHandle {
    let made = (|| {
        let urls = required(registry, "registry")?;
        let function = required(function, "function")?;
        let client = RegistryClient::new(&urls, text(token, "token")?.as_deref());
        let mut options = BoundOptions {
            via: Via::Rac,
            ..BoundOptions::default()
        };
        if rebind_wait_ms > 0 {
            options.rebind_wait = Duration::from_millis(rebind_wait_ms.into());
        }
        Bound::bind(client, &function, options).map_err(|e| bound_failure(&e))
    })();
    match made {
        Ok(b) => {
            clear(err);
            Box::into_raw(Box::new(BoundHandle(b)))
        }
        Err(f) => {
            report(err, &f);
            ptr::null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn netaccel_bound_call(
    bound: *mut BoundHandle,
    params: *const c_char,
    payload: *const u8,
    len: usize,
    deadline_us: u32,
    out: *mut CBuffer,
    err: *mut CError,
) -> c_int {
    let Some(b) = bound.as_mut() else {
        return report(err, &Failure::new(kind::INVALID, "bound is NULL"));
    };
    let r = (|| {
        let pairs = parse_params(&text(params, "params")?.unwrap_or_default())?;
        let deadline = (deadline_us > 0).then_some(deadline_us);
        let out = b.0.call(&pairs, &bytes(payload, len)?, deadline);
        out.map(|o| o.output).map_err(|e| bound_failure(&e))
    })();
    finish(out, err, r)
}

#[no_mangle]
pub unsafe extern "C" fn netaccel_bound_set_unreachable_after(
    bound: *mut BoundHandle,
    after_ms: u32,
    err: *mut CError,
) -> c_int {
    let Some(b) = bound.as_mut() else {
        return report(err, &Failure::new(kind::INVALID, "bound is NULL"));
    };
    let after = (after_ms > 0).then(|| Duration::from_millis(after_ms.into()));
    b.0.set_unreachable_after(after);
    clear(err)
}

#[no_mangle]
pub unsafe extern "C" fn netaccel_bound_release(
    bound: *mut BoundHandle,
    err: *mut CError,
) -> c_int {
    if bound.is_null() {
        return clear(err);
    }
    match Box::from_raw(bound).0.release() {
        Ok(()) => clear(err),
        Err(e) => report(err, &bound_failure(&e)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn netaccel_bound_free(bound: *mut BoundHandle) {
    if !bound.is_null() {
        drop(Box::from_raw(bound));
    }
}
