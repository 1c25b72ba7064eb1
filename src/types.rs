//! Datatypes and reduction operators as oxccl uses them internally. The C ABI passes them as
//! plain ints (`ncclDataType_t`, `ncclRedOp_t`); `api` converts them here after validation.

/// `ncclDataType_t`. Discriminants are NCCL's values and index the kernel tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DataType {
    /// ncclInt8 (ncclChar): 8-bit signed integer.
    Int8 = 0,
    /// ncclUint8.
    Uint8 = 1,
    /// ncclInt32 (ncclInt).
    Int32 = 2,
    /// ncclUint32.
    Uint32 = 3,
    /// ncclInt64.
    Int64 = 4,
    /// ncclUint64.
    Uint64 = 5,
    /// ncclFloat16 (ncclHalf): IEEE binary16.
    Float16 = 6,
    /// ncclFloat32 (ncclFloat).
    Float32 = 7,
    /// ncclFloat64 (ncclDouble).
    Float64 = 8,
    /// ncclBfloat16.
    Bfloat16 = 9,
    /// ncclFloat8e4m3 (OCP E4M3, finite-only); reductions need compute capability 9.0.
    Float8e4m3 = 10,
    /// ncclFloat8e5m2 (OCP E5M2); reductions need compute capability 9.0.
    Float8e5m2 = 11,
}

impl DataType {
    /// ncclNumTypes.
    pub const COUNT: usize = 12;
    /// Every datatype, in NCCL's order (`ALL[d as usize] == d`).
    pub const ALL: [DataType; 12] = [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
        DataType::Bfloat16,
        DataType::Float8e4m3,
        DataType::Float8e5m2,
    ];

    /// The datatype of a raw `ncclDataType_t`; None outside NCCL's values.
    pub fn from_raw(v: i32) -> Option<DataType> {
        usize::try_from(v).ok().and_then(|i| DataType::ALL.get(i).copied())
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 | DataType::Float8e4m3 | DataType::Float8e5m2 => 1,
            DataType::Float16 | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Float64 => 8,
        }
    }

    /// Float8e4m3 or Float8e5m2.
    pub fn is_fp8(self) -> bool {
        matches!(self, DataType::Float8e4m3 | DataType::Float8e5m2)
    }

    /// Any floating-point type (fp8, fp16, bf16, fp32, fp64).
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::Bfloat16 | DataType::Float8e4m3 | DataType::Float8e5m2
        )
    }

    /// The name used in kernel symbols and logs.
    pub fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "i8",
            DataType::Uint8 => "u8",
            DataType::Int32 => "i32",
            DataType::Uint32 => "u32",
            DataType::Int64 => "i64",
            DataType::Uint64 => "u64",
            DataType::Float16 => "f16",
            DataType::Float32 => "f32",
            DataType::Float64 => "f64",
            DataType::Bfloat16 => "bf16",
            DataType::Float8e4m3 => "f8e4m3",
            DataType::Float8e5m2 => "f8e5m2",
        }
    }
}

/// Reduction operators as kernels know them. Discriminants of the built-ins are NCCL's
/// `ncclRedOp_t` values; all index the kernel tables. `PreMulSum` is the device-side form of every
/// op made by ncclRedOpCreatePreMulSum (its scalar travels in the kernel arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RedOp {
    /// ncclSum.
    Sum = 0,
    /// ncclProd.
    Prod = 1,
    /// ncclMax.
    Max = 2,
    /// ncclMin.
    Min = 3,
    /// ncclAvg: the sum divided by the rank count.
    Avg = 4,
    /// Every input times its rank's scalar, then summed (ncclRedOpCreatePreMulSum).
    PreMulSum = 5,
}

impl RedOp {
    /// The kernel tables' op count (the built-ins and PreMulSum).
    pub const COUNT: usize = 6;
    /// Every op, in discriminant order.
    pub const ALL: [RedOp; 6] = [RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg, RedOp::PreMulSum];
    /// NCCL's ncclNumOps: built-in ops are below it, user-created ops at or above.
    pub const NUM_BUILTIN: i32 = 5;

    /// A built-in op from its raw value; user-created ops (>= ncclNumOps) are not built-ins.
    pub fn builtin(v: i32) -> Option<RedOp> {
        usize::try_from(v).ok().filter(|&i| i < Self::NUM_BUILTIN as usize).map(|i| RedOp::ALL[i])
    }

    /// The name used in kernel symbols and logs.
    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Max => "max",
            RedOp::Min => "min",
            RedOp::Avg => "avg",
            RedOp::PreMulSum => "premulsum",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datatype_values_are_nccls() {
        assert_eq!(DataType::from_raw(7), Some(DataType::Float32));
        assert_eq!(DataType::from_raw(9), Some(DataType::Bfloat16));
        assert_eq!(DataType::from_raw(12), None);
        assert_eq!(DataType::from_raw(-1), None);
        for (i, d) in DataType::ALL.iter().enumerate() {
            assert_eq!(*d as usize, i);
        }
        assert_eq!(DataType::Float64.size(), 8);
        assert_eq!(DataType::Float8e5m2.size(), 1);
    }

    #[test]
    fn builtin_ops() {
        assert_eq!(RedOp::builtin(4), Some(RedOp::Avg));
        assert_eq!(RedOp::builtin(5), None);
        assert_eq!(RedOp::builtin(-3), None);
    }
}

/// A collective, as the launch path, the planners and the diagnostics name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coll {
    /// ncclAllReduce.
    AllReduce,
    /// ncclReduceScatter.
    ReduceScatter,
    /// ncclReduce.
    Reduce,
    /// ncclAllGather.
    AllGather,
    /// ncclBroadcast (and ncclBcast).
    Broadcast,
    /// ncclAlltoAll.
    AlltoAll,
    /// ncclGather.
    Gather,
    /// ncclScatter.
    Scatter,
}

/// An op as a kernel takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResolvedOp {
    /// The kernel's op.
    pub op: RedOp,
    /// PreMulSum's host scalar, its bytes in the low bits (ncclScalarHostImmediate); else 0.
    pub scalar: u64,
    /// PreMulSum's device scalar's address (ncclScalarDevice); else 0.
    pub scalar_ptr: u64,
}
