//! NCCL 2.32's parameter API: NCCL_* settings read by key, typed or as text, over the registry
//! in config/params (every NCCL_* setting oxccl reads). Semantics follow NCCL 2.30.7
//! src/param/c_api.cc and src/include/param/param.h, checked against NCCL 2.32.3's library:
//! keys are full environment names (`NCCL_DEBUG`; `DEBUG` or `nccl_debug` are not found); typed
//! getters accept only the parameter's own C type; values are read at each call; returned
//! strings live in per-thread buffers. Every function may be called from any thread, before or
//! without any communicator.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::mem::size_of;

use super::call;
use super::types::ncclResult_t;
use crate::config::params::{self, Entry, TypeId};
use crate::error::{Error, Result};

/// The opaque target of a parameter handle (nccl.h: `typedef struct ncclParamHandle*
/// ncclParamHandle_t;`).
#[repr(C)]
pub struct ncclParamHandle {
    _opaque: [u8; 0],
}

/// A parameter handle: points at a registry entry, valid for the life of the library.
#[allow(non_camel_case_types)] // NCCL's name
pub type ncclParamHandle_t = *mut ncclParamHandle;

/// The entry behind a handle; NULL and anything ncclParamBind did not return are invalid (NCCL
/// would dereference them).
fn entry_of(h: ncclParamHandle_t) -> Result<&'static Entry> {
    if h.is_null() {
        return Err(Error::invalid_argument("h argument is NULL"));
    }
    let range = params::REGISTRY.as_ptr_range();
    let p = h as *const Entry;
    if !range.contains(&p) || !(p as usize - range.start as usize).is_multiple_of(size_of::<Entry>()) {
        return Err(Error::invalid_argument("h argument is not a handle from ncclParamBind"));
    }
    // SAFETY: p is the address of an element of the static registry (checked just above).
    Ok(unsafe { &*p })
}

/// The registered parameter named by the C string `key`.
fn entry_named(key: *const c_char) -> Result<&'static Entry> {
    // SAFETY: non-NULL keys are NUL-terminated strings (the C contract); checked non-NULL first.
    let name = unsafe { CStr::from_ptr(key) }.to_str().ok();
    name.and_then(params::find).ok_or_else(|| {
        let shown = unsafe { CStr::from_ptr(key) }.to_string_lossy();
        Error::invalid_argument(format!("PARAM: key \"{shown}\" not found in registry"))
    })
}

fn null(what: &str) -> Error {
    Error::invalid_argument(format!("{what} argument is NULL"))
}

/// A C string of `text`, cut at an interior NUL (a configuration file could hold one).
fn c_string(text: String) -> CString {
    CString::new(text).unwrap_or_else(|e| {
        let n = e.nul_position();
        let mut bytes = e.into_vec();
        bytes.truncate(n);
        CString::new(bytes).unwrap_or_default()
    })
}

/// Looks up the parameter named `key` and stores its handle in `*out`. The handle belongs to
/// the library, stays valid while it is loaded, and must not be freed. Keys are the full,
/// case-sensitive environment names ("NCCL_DEBUG"), as in NCCL. The first lookup of a key that
/// oxccl does not act on, or that NCCL does not document, says so at INFO (ENV).
///
/// Returns ncclSuccess, or ncclInvalidArgument (`out` or `key` NULL; `key` not registered, with
/// `*out` left unchanged).
#[no_mangle]
pub extern "C" fn ncclParamBind(out: *mut ncclParamHandle_t, key: *const c_char) -> ncclResult_t {
    call("ncclParamBind", || {
        if out.is_null() || key.is_null() {
            return Err(null(if out.is_null() { "out" } else { "key" }));
        }
        let e = entry_named(key)?;
        params::note_lookup(e);
        // SAFETY: out is non-NULL and points to a writable handle (the C contract).
        unsafe { *out = e as *const Entry as ncclParamHandle_t };
        Ok(())
    })
}

/// The typed getters' common body: `h`'s value, whose C type must be `want`, into `*out`.
fn get_typed<T>(name: &'static str, h: ncclParamHandle_t, out: *mut T, want: TypeId) -> ncclResult_t {
    call(name, || {
        if h.is_null() || out.is_null() {
            return Err(null(if h.is_null() { "h" } else { "out" }));
        }
        let e = entry_of(h)?;
        if e.kind.type_id() != want {
            return Err(Error::invalid_argument(format!(
                "PARAM: type mismatch for key \"{}\" ({} requested, the parameter is {})",
                e.name(),
                want.c_name(),
                e.kind.type_str()
            )));
        }
        let bytes = e.resolve().0.to_bytes();
        if bytes.len() != size_of::<T>() {
            return Err(Error::internal(format!("PARAM: {} holds {} bytes, not {}", e.name(), bytes.len(), size_of::<T>())));
        }
        // SAFETY: out is non-NULL and points to a writable T (the C contract); bytes holds
        // exactly size_of::<T>() bytes of a T of the same type (checked above).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, bytes.len()) };
        Ok(())
    })
}

/// Reads the int8_t parameter bound to `h` into `*out`.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`h` or `out` NULL, `h` not from ncclParamBind,
/// or the parameter is not an int8_t: NCCL converts between no types).
#[no_mangle]
pub extern "C" fn ncclParamGetI8(h: ncclParamHandle_t, out: *mut i8) -> ncclResult_t {
    get_typed("ncclParamGetI8", h, out, TypeId::I8)
}

/// Reads the int16_t parameter bound to `h` into `*out`.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`h` or `out` NULL, `h` not from ncclParamBind,
/// or the parameter is not an int16_t).
#[no_mangle]
pub extern "C" fn ncclParamGetI16(h: ncclParamHandle_t, out: *mut i16) -> ncclResult_t {
    get_typed("ncclParamGetI16", h, out, TypeId::I16)
}

/// Reads the int32_t parameter bound to `h` into `*out`.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`h` or `out` NULL, `h` not from ncclParamBind,
/// or the parameter is not an int32_t).
#[no_mangle]
pub extern "C" fn ncclParamGetI32(h: ncclParamHandle_t, out: *mut i32) -> ncclResult_t {
    get_typed("ncclParamGetI32", h, out, TypeId::I32)
}

/// Reads the int64_t parameter bound to `h` into `*out` (the integer NCCL_* settings, such as
/// NCCL_IB_TIMEOUT or NCCL_P2P_DISABLE, are int64_t, as NCCL's NCCL_PARAM settings are).
///
/// Returns ncclSuccess, or ncclInvalidArgument (`h` or `out` NULL, `h` not from ncclParamBind,
/// or the parameter is not an int64_t).
#[no_mangle]
pub extern "C" fn ncclParamGetI64(h: ncclParamHandle_t, out: *mut i64) -> ncclResult_t {
    get_typed("ncclParamGetI64", h, out, TypeId::I64)
}

/// Reads the uint8_t parameter bound to `h` into `*out`.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`h` or `out` NULL, `h` not from ncclParamBind,
/// or the parameter is not a uint8_t).
#[no_mangle]
pub extern "C" fn ncclParamGetU8(h: ncclParamHandle_t, out: *mut u8) -> ncclResult_t {
    get_typed("ncclParamGetU8", h, out, TypeId::U8)
}

/// Reads the uint16_t parameter bound to `h` into `*out`.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`h` or `out` NULL, `h` not from ncclParamBind,
/// or the parameter is not a uint16_t).
#[no_mangle]
pub extern "C" fn ncclParamGetU16(h: ncclParamHandle_t, out: *mut u16) -> ncclResult_t {
    get_typed("ncclParamGetU16", h, out, TypeId::U16)
}

/// Reads the uint32_t parameter bound to `h` into `*out` (NCCL_DEBUG_TIMESTAMP_LEVELS and
/// NCCL_DEBUG_LEVELS: bit `1 << level` per level).
///
/// Returns ncclSuccess, or ncclInvalidArgument (`h` or `out` NULL, `h` not from ncclParamBind,
/// or the parameter is not a uint32_t).
#[no_mangle]
pub extern "C" fn ncclParamGetU32(h: ncclParamHandle_t, out: *mut u32) -> ncclResult_t {
    get_typed("ncclParamGetU32", h, out, TypeId::U32)
}

/// Reads the uint64_t parameter bound to `h` into `*out` (NCCL_DEBUG_SUBSYS: the subsystem mask).
///
/// Returns ncclSuccess, or ncclInvalidArgument (`h` or `out` NULL, `h` not from ncclParamBind,
/// or the parameter is not a uint64_t).
#[no_mangle]
pub extern "C" fn ncclParamGetU64(h: ncclParamHandle_t, out: *mut u64) -> ncclResult_t {
    get_typed("ncclParamGetU64", h, out, TypeId::U64)
}

thread_local! {
    /// ncclParamGetStr's result, kept until the thread's next ncclParamGetStr.
    static STR: RefCell<CString> = RefCell::new(CString::default());
    /// ncclParamGetParameter's result, kept until the thread's next ncclParamGetParameter.
    static PARAMETER: RefCell<CString> = RefCell::new(CString::default());
    /// ncclParamGetAllParameterKeys's table, kept until the thread's next call.
    static KEYS: RefCell<Vec<*const c_char>> = const { RefCell::new(Vec::new()) };
}

/// Stores in `*out` the value of the string (const char*) parameter bound to `h`; an unset
/// string with no default reads "" (never NULL). The string belongs to the library and stays
/// valid until the calling thread's next ncclParamGetStr (copy it to keep it).
///
/// Returns ncclSuccess, or ncclInvalidArgument (`h` or `out` NULL, `h` not from ncclParamBind,
/// or the parameter is not a string: other types read as text through ncclParamGetParameter).
#[no_mangle]
pub extern "C" fn ncclParamGetStr(h: ncclParamHandle_t, out: *mut *const c_char) -> ncclResult_t {
    call("ncclParamGetStr", || {
        if h.is_null() || out.is_null() {
            return Err(null(if h.is_null() { "h" } else { "out" }));
        }
        let e = entry_of(h)?;
        if e.kind.type_id() != TypeId::Cstr {
            return Err(Error::invalid_argument(format!(
                "PARAM: type mismatch for key \"{}\" (const char* requested, the parameter is {})",
                e.name(),
                e.kind.type_str()
            )));
        }
        let text = c_string(e.text(&e.resolve().0));
        let ptr = STR.with(|s| {
            *s.borrow_mut() = text;
            s.borrow().as_ptr()
        });
        // SAFETY: out is non-NULL and points to a writable pointer (the C contract).
        unsafe { *out = ptr };
        Ok(())
    })
}

/// Copies the raw bytes of the parameter bound to `h` into the caller's buffer `out` of
/// `maxLen` bytes and stores their number in `*len`: the C object itself (8 bytes for an
/// int64_t, 1 for a bool, 4 for ncclDebugLogLevel), or for a string its characters and the
/// terminating NUL.
///
/// Returns ncclSuccess, or ncclInvalidArgument: `h`, `out` or `len` NULL, `h` not from
/// ncclParamBind, or `maxLen` <= 0 (`*len` untouched); the value larger than `maxLen` (`*len`
/// set to 0, as NCCL 2.32.3 does; its guide says the required size).
#[no_mangle]
pub extern "C" fn ncclParamGet(h: ncclParamHandle_t, out: *mut c_void, maxLen: c_int, len: *mut c_int) -> ncclResult_t {
    call("ncclParamGet", || {
        if h.is_null() || out.is_null() || len.is_null() {
            return Err(null(if h.is_null() { "h" } else if out.is_null() { "out" } else { "len" }));
        }
        let e = entry_of(h)?;
        if maxLen <= 0 {
            return Err(Error::invalid_argument(format!("maxLen {maxLen} is not positive")));
        }
        let bytes = e.resolve().0.to_bytes();
        let n = c_int::try_from(bytes.len()).unwrap_or(c_int::MAX);
        if n > maxLen {
            // SAFETY: len is non-NULL and points to a writable int (the C contract).
            unsafe { *len = 0 };
            return Err(Error::invalid_argument(format!("PARAM: {} needs {n} bytes, maxLen is {maxLen}", e.name())));
        }
        // SAFETY: out points to at least maxLen >= n writable bytes and len to a writable int
        // (the C contract).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, bytes.len());
            *len = n;
        }
        Ok(())
    })
}

/// Stores in `*value` the parameter named `key` as text (integers in decimal, bools TRUE or
/// FALSE, NCCL_DEBUG's level name or "<unknown>" when unset, NCCL_DEBUG_SUBSYS's names such as
/// "INIT,ENV,BOOTSTRAP", strings as they are, "" when unset) and its length in bytes, without
/// the NUL, in `*valueLen`. The string belongs to the library and stays valid until the calling
/// thread's next ncclParamGetParameter.
///
/// Returns ncclSuccess, or ncclInvalidArgument: `key`, `value` or `valueLen` NULL (nothing
/// written); `key` not registered (`*value` set to NULL and `*valueLen` to 0).
#[no_mangle]
pub extern "C" fn ncclParamGetParameter(key: *const c_char, value: *mut *const c_char, valueLen: *mut c_int) -> ncclResult_t {
    call("ncclParamGetParameter", || {
        if key.is_null() || value.is_null() || valueLen.is_null() {
            return Err(null(if key.is_null() { "key" } else if value.is_null() { "value" } else { "valueLen" }));
        }
        let e = match entry_named(key) {
            Ok(e) => e,
            Err(err) => {
                // SAFETY: both non-NULL and writable (the C contract).
                unsafe {
                    *value = std::ptr::null();
                    *valueLen = 0;
                }
                return Err(err);
            }
        };
        params::note_lookup(e);
        let text = c_string(e.text(&e.resolve().0));
        let n = c_int::try_from(text.as_bytes().len()).unwrap_or(c_int::MAX);
        let ptr = PARAMETER.with(|s| {
            *s.borrow_mut() = text;
            s.borrow().as_ptr()
        });
        // SAFETY: both non-NULL and writable (the C contract).
        unsafe {
            *value = ptr;
            *valueLen = n;
        }
        Ok(())
    })
}

/// Stores in `*table` an array of `*tableLen` keys: those NCCL's documentation publishes, or
/// every registered key when NCCL_PARAM_DUMP_ALL is true (1/T/TRUE, read at each call), in no
/// promised order. The array belongs to the library and stays valid until the calling thread's
/// next ncclParamGetAllParameterKeys; the key strings stay valid while the library is loaded.
///
/// Returns ncclSuccess, or ncclInvalidArgument (`table` or `tableLen` NULL).
#[no_mangle]
pub extern "C" fn ncclParamGetAllParameterKeys(table: *mut *mut *const c_char, tableLen: *mut c_int) -> ncclResult_t {
    call("ncclParamGetAllParameterKeys", || {
        if table.is_null() || tableLen.is_null() {
            return Err(null(if table.is_null() { "table" } else { "tableLen" }));
        }
        let show_all = params::show_all();
        let (ptr, n) = KEYS.with(|k| {
            let mut k = k.borrow_mut();
            k.clear();
            k.extend(params::listed(show_all).map(|e| e.key.as_ptr()));
            (k.as_mut_ptr(), k.len())
        });
        // SAFETY: both non-NULL and writable (the C contract).
        unsafe {
            *table = ptr;
            *tableLen = c_int::try_from(n).unwrap_or(c_int::MAX);
        }
        Ok(())
    })
}

extern "C" {
    // glibc's `FILE *stdout`, as NCCL's printf uses (read at each call: a program may reassign it).
    static mut stdout: *mut libc::FILE;
}

/// Prints every published parameter (all of them when NCCL_PARAM_DUMP_ALL is true) to the C
/// library's stdout, as NCCL 2.32.3 does with printf whatever NCCL_DEBUG says: a line
/// "=== ncclParam Registry Dump ===", then for each parameter "KEY (type) [flags] description",
/// "    Current value=V set_by=Default|EnvPlugin default=D", "    Accepted value: ..." and a
/// blank line. Flags: Private (not in NCCL's documentation), Unused (no effect in oxccl).
/// Any thread; never fails.
#[no_mangle]
pub extern "C" fn ncclParamDumpAll() {
    let _ = std::panic::catch_unwind(|| {
        let text = params::dump_all(params::show_all());
        // SAFETY: reads the pointer value of C's stdout; fwrite locks the FILE and takes any
        // buffer of the given length. Flushed so the text keeps its place among the program's
        // own printf output and the logger's lines, which flush each line.
        unsafe {
            let f = stdout;
            if !f.is_null() {
                libc::fwrite(text.as_ptr() as *const c_void, 1, text.len(), f);
                libc::fflush(f);
            }
        }
    });
}

#[cfg(test)]
mod tests;
