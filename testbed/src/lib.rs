//! The rlm lab (`rlm-lab`): an emulated server farm, browsers and WAN on one machine, in
//! network namespaces, with the appliance as a bridge between them.

pub mod arm;
pub mod attack;
pub mod bpfmaps;
pub mod calibrate;
pub mod catalog;
pub mod cpus;
pub mod experiments;
pub mod farm;
pub mod inline;
pub mod live;
pub mod netns;
pub mod raw;
pub mod report;
pub mod runner;
pub mod speed;
pub mod stats;
pub mod throughput;
pub mod topology;
pub mod wan;
