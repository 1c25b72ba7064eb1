//! Configuration: NCCL_*/OXCCL_* settings from the environment and nccl.conf files, and the
//! communicator config a caller passes as ncclConfig_t.

mod c_integer;
mod comm_config;
mod comm_env;
mod conf_file;
mod env;

pub use c_integer::{parse_c_integer, IntError};
pub use comm_config::{config_initializer, parse_comm_config, CommConfig, MAX_CHANNELS};
pub use conf_file::conf_file_values;
pub use env::{env, env_bool, env_i64, lookup, raw_lookup, Source};
