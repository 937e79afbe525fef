//! Load for the rlm lab: emulated browsers, open-loop generators and WAN emulation.
//!
//! This crate starts with the workload models the experiments are built on: the task-size
//! distribution of `001` Table 1 (lognormal body, bounded-Pareto tail) for the open-loop SRPT
//! experiments, and the negative-exponential think time of TPC-W browsers (004 section 6).

pub mod browser;
pub mod dist;
pub mod tcp_profile;
pub mod wan;
