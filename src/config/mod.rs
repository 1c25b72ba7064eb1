//! Configuration: NCCL_*/OXCCL_* settings as oxccl reads them (through getenv/, logging what it
//! read), and the communicator config a caller passes as ncclConfig_t.

pub mod abi;
pub mod coll_config;
mod comm_config;
mod comm_env;
mod env;
pub mod params;

pub use comm_config::{config_initializer, parse_comm_config, CommConfig, MAX_CHANNELS};
pub use env::{env, env_bool, env_i64};
