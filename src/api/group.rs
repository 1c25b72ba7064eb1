//! Group calls.

use super::types::{ncclResult_t, ncclSimInfo_t, NCCL_SIM_INFO_MAGIC};
use super::{call, out};
use crate::error::Error;
use crate::group;

#[no_mangle]
pub extern "C" fn ncclGroupStart() -> ncclResult_t {
    call("ncclGroupStart", || {
        crate::hostprof::begin();
        group::start();
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn ncclGroupEnd() -> ncclResult_t {
    call("ncclGroupEnd", || {
        let r = group::end();
        crate::hostprof::end(group::depth() > 0);
        r
    })
}

/// Like ncclGroupEnd, but launches nothing; stores the predicted time (microseconds, as NCCL's
/// estimatedTime) of the group's collectives.
#[no_mangle]
pub extern "C" fn ncclGroupSimulateEnd(simInfo: *mut ncclSimInfo_t) -> ncclResult_t {
    call("ncclGroupSimulateEnd", || {
        let info = out(simInfo, "simInfo")?;
        if info.magic != NCCL_SIM_INFO_MAGIC {
            return Err(Error::invalid_argument("ncclSimInfo_t not initialized via NCCL_SIM_INFO_INITIALIZER"));
        }
        let us = group::simulate_end()?;
        if info.size >= std::mem::size_of::<ncclSimInfo_t>() {
            info.estimatedTime = us as f32;
        }
        Ok(())
    })
}
