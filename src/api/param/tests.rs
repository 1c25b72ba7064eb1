//! The C functions called as C calls them, on the CPU. Nothing here changes the environment
//! (tests run in parallel in one process); ffi-tests/param.c covers setenv and
//! NCCL_PARAM_DUMP_ALL in a process of its own.

use super::*;
use crate::config::params::{find, listed, show_all, Value};
use crate::error::ResultCode;
use std::ptr::{null, null_mut};

const OK: ncclResult_t = ResultCode::Success;
const INVALID: ncclResult_t = ResultCode::InvalidArgument;

fn bind(key: &CStr) -> ncclParamHandle_t {
    let mut h: ncclParamHandle_t = null_mut();
    assert_eq!(ncclParamBind(&mut h, key.as_ptr()), OK, "{key:?}");
    assert!(!h.is_null());
    h
}

fn current(key: &str) -> Value {
    find(key).unwrap().resolve().0
}

#[test]
fn bind_takes_full_keys_only() {
    let a = bind(c"NCCL_DEBUG");
    assert_eq!(a, bind(c"NCCL_DEBUG"), "one handle per parameter");
    assert_ne!(a, bind(c"NCCL_DEBUG_SUBSYS"));
    let sentinel = 0x1234usize as ncclParamHandle_t;
    for key in [c"DEBUG", c"nccl_debug", c"NCCL_DEBUG ", c"NCCL_SURELY_NOT_A_PARAM", c"OXCCL_CHECK", c""] {
        let mut h = sentinel;
        assert_eq!(ncclParamBind(&mut h, key.as_ptr()), INVALID, "{key:?}");
        assert_eq!(h, sentinel, "{key:?}: *out is left alone");
    }
    let mut h = sentinel;
    assert_eq!(ncclParamBind(&mut h, null()), INVALID);
    assert_eq!(h, sentinel);
    assert_eq!(ncclParamBind(null_mut(), c"NCCL_DEBUG".as_ptr()), INVALID);
    // Non-UTF-8 bytes are simply not a key.
    assert_eq!(ncclParamBind(&mut h, c"NCCL_\xff".as_ptr()), INVALID);
}

#[test]
fn typed_getters_need_the_exact_type() {
    let subsys = bind(c"NCCL_DEBUG_SUBSYS");
    let mut u64v = 0u64;
    assert_eq!(ncclParamGetU64(subsys, &mut u64v), OK);
    assert_eq!(Value::U64(u64v), current("NCCL_DEBUG_SUBSYS"));
    let (mut i64v, mut u32v, mut i32v, mut i8v, mut u8v, mut i16v, mut u16v) = (7i64, 7u32, 7i32, 7i8, 7u8, 7i16, 7u16);
    assert_eq!(ncclParamGetI64(subsys, &mut i64v), INVALID, "no conversion, even where the value fits");
    assert_eq!(ncclParamGetU32(subsys, &mut u32v), INVALID);
    assert_eq!((i64v, u32v), (7, 7), "nothing written on a mismatch");

    let timeout = bind(c"NCCL_IB_TIMEOUT");
    assert_eq!(ncclParamGetI64(timeout, &mut i64v), OK);
    assert_eq!(Value::I64(i64v), current("NCCL_IB_TIMEOUT"));
    assert_eq!(ncclParamGetI32(timeout, &mut i32v), INVALID);
    assert_eq!(ncclParamGetI8(timeout, &mut i8v), INVALID);
    assert_eq!(ncclParamGetI16(timeout, &mut i16v), INVALID);
    assert_eq!(ncclParamGetU8(timeout, &mut u8v), INVALID);
    assert_eq!(ncclParamGetU16(timeout, &mut u16v), INVALID);
    assert_eq!(ncclParamGetU64(timeout, &mut u64v), INVALID);

    let levels = bind(c"NCCL_DEBUG_TIMESTAMP_LEVELS");
    assert_eq!(ncclParamGetU32(levels, &mut u32v), OK);
    assert_eq!(Value::U32(u32v), current("NCCL_DEBUG_TIMESTAMP_LEVELS"));

    // ncclDebugLogLevel is an enum: no typed getter reads it, as in NCCL.
    let debug = bind(c"NCCL_DEBUG");
    assert_eq!(ncclParamGetI32(debug, &mut i32v), INVALID);
    assert_eq!(ncclParamGetU32(debug, &mut u32v), INVALID);
    let mut s: *const c_char = null();
    assert_eq!(ncclParamGetStr(debug, &mut s), INVALID);
    assert!(s.is_null());
}

#[test]
fn null_and_forged_handles_are_rejected() {
    let mut v = 0u64;
    assert_eq!(ncclParamGetU64(null_mut(), &mut v), INVALID);
    assert_eq!(ncclParamGetU64(bind(c"NCCL_DEBUG_SUBSYS"), null_mut()), INVALID);
    let mut local = 0u64;
    let forged = [
        &mut local as *mut u64 as ncclParamHandle_t,
        (bind(c"NCCL_DEBUG_SUBSYS") as usize + 1) as ncclParamHandle_t,
        0x10 as ncclParamHandle_t,
    ];
    for h in forged {
        assert_eq!(ncclParamGetU64(h, &mut v), INVALID, "{h:?}");
        let mut s: *const c_char = null();
        assert_eq!(ncclParamGetStr(h, &mut s), INVALID);
        let (mut buf, mut len) = ([0u8; 16], -1);
        assert_eq!(ncclParamGet(h, buf.as_mut_ptr() as *mut c_void, 16, &mut len), INVALID);
        assert_eq!(len, -1);
    }
}

#[test]
fn get_str_lives_until_the_threads_next_call() {
    let fmt = bind(c"NCCL_DEBUG_TIMESTAMP_FORMAT");
    let file = bind(c"NCCL_DEBUG_FILE");
    let mut a: *const c_char = null();
    assert_eq!(ncclParamGetStr(fmt, &mut a), OK);
    let text_a = unsafe { CStr::from_ptr(a) }.to_str().unwrap().to_string();
    let Value::Str(expected) = current("NCCL_DEBUG_TIMESTAMP_FORMAT") else { panic!() };
    assert_eq!(Some(text_a.as_str()), expected.as_deref());
    // Another thread's calls leave this thread's string alone.
    let f = file as usize;
    std::thread::spawn(move || {
        let mut b: *const c_char = null();
        assert_eq!(ncclParamGetStr(f as ncclParamHandle_t, &mut b), OK);
        assert!(!b.is_null());
    })
    .join()
    .unwrap();
    assert_eq!(unsafe { CStr::from_ptr(a) }.to_str().unwrap(), text_a);
    let mut c: *const c_char = null();
    assert_eq!(ncclParamGetStr(file, &mut c), OK);
    assert!(!c.is_null(), "an unset string reads \"\", never NULL");
}

#[test]
fn get_copies_the_c_object() {
    let subsys = bind(c"NCCL_DEBUG_SUBSYS");
    let mut buf = [0xeeu8; 16];
    let mut len = -1;
    assert_eq!(ncclParamGet(subsys, buf.as_mut_ptr() as *mut c_void, 16, &mut len), OK);
    assert_eq!(len, 8);
    assert_eq!(buf[..8], current("NCCL_DEBUG_SUBSYS").to_bytes()[..]);
    assert_eq!(buf[8], 0xee, "nothing past the value");
    // Too small: *len = 0 (NCCL 2.32.3's behaviour).
    len = -1;
    assert_eq!(ncclParamGet(subsys, buf.as_mut_ptr() as *mut c_void, 7, &mut len), INVALID);
    assert_eq!(len, 0);
    // maxLen <= 0 or NULLs: *len untouched.
    len = -1;
    assert_eq!(ncclParamGet(subsys, buf.as_mut_ptr() as *mut c_void, 0, &mut len), INVALID);
    assert_eq!(ncclParamGet(subsys, buf.as_mut_ptr() as *mut c_void, -5, &mut len), INVALID);
    assert_eq!(ncclParamGet(subsys, null_mut(), 16, &mut len), INVALID);
    assert_eq!(len, -1);
    assert_eq!(ncclParamGet(subsys, buf.as_mut_ptr() as *mut c_void, 16, null_mut()), INVALID);

    // A string copies its NUL: exactly its length + 1 fits.
    let fmt = bind(c"NCCL_DEBUG_TIMESTAMP_FORMAT");
    let want = current("NCCL_DEBUG_TIMESTAMP_FORMAT").to_bytes();
    let mut big = vec![0xeeu8; want.len() + 4];
    let n = want.len() as c_int;
    assert_eq!(ncclParamGet(fmt, big.as_mut_ptr() as *mut c_void, n, &mut len), OK);
    assert_eq!(len, n);
    assert_eq!(big[..want.len()], want[..]);
    assert_eq!(ncclParamGet(fmt, big.as_mut_ptr() as *mut c_void, n - 1, &mut len), INVALID);
    assert_eq!(len, 0);

    let flag = bind(c"NCCL_PARAM_DUMP_ALL");
    assert_eq!(ncclParamGet(flag, buf.as_mut_ptr() as *mut c_void, 1, &mut len), OK);
    assert_eq!((len, buf[0]), (1, u8::from(show_all())), "a bool is one byte");
}

#[test]
fn get_parameter_gives_text() {
    let mut v: *const c_char = null();
    let mut n: c_int = -1;
    assert_eq!(ncclParamGetParameter(c"NCCL_DEBUG_SUBSYS".as_ptr(), &mut v, &mut n), OK);
    let text = unsafe { CStr::from_ptr(v) }.to_str().unwrap();
    let e = find("NCCL_DEBUG_SUBSYS").unwrap();
    assert_eq!(text, e.text(&e.resolve().0));
    assert_eq!(n as usize, text.len());
    assert_eq!(ncclParamGetParameter(c"NCCL_IB_RETRY_CNT".as_ptr(), &mut v, &mut n), OK);
    let e = find("NCCL_IB_RETRY_CNT").unwrap();
    assert_eq!(unsafe { CStr::from_ptr(v) }.to_str().unwrap(), e.text(&e.resolve().0));

    // Unknown key: *value NULL, *valueLen 0.
    assert_eq!(ncclParamGetParameter(c"DEBUG_SUBSYS".as_ptr(), &mut v, &mut n), INVALID);
    assert!(v.is_null());
    assert_eq!(n, 0);
    // NULL arguments: nothing written.
    let mut n2: c_int = -7;
    assert_eq!(ncclParamGetParameter(null(), &mut v, &mut n2), INVALID);
    assert_eq!(ncclParamGetParameter(c"NCCL_DEBUG".as_ptr(), null_mut(), &mut n2), INVALID);
    assert_eq!(n2, -7);
    assert_eq!(ncclParamGetParameter(c"NCCL_DEBUG".as_ptr(), &mut v, null_mut()), INVALID);
}

#[test]
fn all_keys_lists_the_registry() {
    let mut table: *mut *const c_char = null_mut();
    let mut n: c_int = -1;
    assert_eq!(ncclParamGetAllParameterKeys(&mut table, &mut n), OK);
    let keys: Vec<String> = (0..n as usize)
        .map(|i| unsafe { CStr::from_ptr(*table.add(i)) }.to_str().unwrap().to_string())
        .collect();
    let expected: Vec<String> = listed(show_all()).map(|e| e.name().to_string()).collect();
    assert_eq!(keys, expected);
    assert!(keys.iter().any(|k| k == "NCCL_DEBUG"));
    // Every listed key binds.
    for k in &keys {
        let c = CString::new(k.as_str()).unwrap();
        bind(&c);
    }
    assert_eq!(ncclParamGetAllParameterKeys(null_mut(), &mut n), INVALID);
    assert_eq!(ncclParamGetAllParameterKeys(&mut table, null_mut()), INVALID);
}
