//! The server farm, from real parts, in the lab's server namespace:
//!
//! - the front server ([`front`], run as `rlm-lab farm-front`): MaxClients, listen backlog,
//!   keep-alive, and a worker pool building TPC-W pages ([`site`]) from PostgreSQL;
//! - nginx, the static tier, serving the images on 127.0.0.1:8081;
//! - PostgreSQL ([`db`]), the database tier.
//!
//! All three run in one CPU-quota cgroup ([`cgroup`]) so that the farm, not the load generators
//! sharing this machine's two cores, is what saturates.

pub mod cgroup;
pub mod db;
pub mod front;
pub mod sampler;
pub mod site;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::topology::{Plan, FARM_ADDR};
use cgroup::CpuCgroup;
use db::{Postgres, Scale};

pub const FRONT_PORT: u16 = 80;
/// The front server's port when it terminates HTTPS.
pub const FRONT_TLS_PORT: u16 = 443;
pub const STATIC_PORT: u16 = 8081;
/// nginx serving the open-loop experiments' files directly (the link, not the farm, is their bottleneck).
pub const FILES_PORT: u16 = 8080;

/// The farm's capacity.
#[derive(Clone, Debug, Serialize)]
pub struct FarmConfig {
    pub max_clients: usize,
    pub backlog: i32,
    pub workers: usize,
    pub keepalive_s: f64,
    /// CPU time per second for the whole farm (None: unlimited).
    pub cpu_cores: Option<f64>,
    pub items: u32,
    pub orders: u32,
    /// The servers' initial SYN/ACK retransmission timeout. Linux 2.4, the servers of 004's
    /// testbed, waited 3 s (as clients did); today's Linux waits 1 s. None: this kernel's own.
    pub synack_timeout_s: Option<f64>,
    /// Files `/files/{i}` for the open-loop experiments, sizes from 001 Table 1 (none: empty).
    #[serde(skip)]
    pub files: Vec<u64>,
    /// HTTPS: the front server terminates TLS on [`FRONT_TLS_PORT`] with a certificate for
    /// these names, made at its start by a lab authority ([`sim_clients::tls::make_certs`]);
    /// empty: HTTP on [`FRONT_PORT`].
    pub tls_sites: Vec<String>,
}

impl FarmConfig {
    /// The front server's port: [`FRONT_TLS_PORT`] for HTTPS, else [`FRONT_PORT`].
    pub fn front_port(&self) -> u16 {
        if self.tls_sites.is_empty() {
            FRONT_PORT
        } else {
            FRONT_TLS_PORT
        }
    }
}

impl Default for FarmConfig {
    fn default() -> Self {
        FarmConfig {
            max_clients: 150,
            backlog: 64,
            workers: 8,
            keepalive_s: 15.0,
            cpu_cores: Some(0.6),
            items: 10_000,
            orders: 30_000,
            synack_timeout_s: Some(3.0),
            files: Vec::new(),
            tls_sites: Vec::new(),
        }
    }
}

/// What the farm used during a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FarmUsage {
    /// CPU time the farm used, from its start (the database's load included).
    pub cpu_s: f64,
    /// CPU time the farm used while the clients ran.
    pub load_cpu_s: f64,
    pub throttled_periods: u64,
    pub throttled_s: f64,
}

/// A running farm. Stopped on drop.
pub struct Farm {
    pub dir: PathBuf,
    /// Its certificates, when it serves HTTPS.
    pub certs: Option<sim_clients::tls::LabCerts>,
    pg: Option<Postgres>,
    nginx: Option<Child>,
    front: Option<Child>,
    cgroup: Option<CpuCgroup>,
}

fn nginx_conf(dir: &Path, docroot: &Path) -> String {
    format!(
        "user www-data;\nworker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/nginx-error.log warn;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  keepalive_timeout 120;\n  keepalive_requests 1000000;\n\
           types {{ image/gif gif; }}\n  default_type application/octet-stream;\n\
           client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp; uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n\
           server {{\n    listen 127.0.0.1:{STATIC_PORT};\n    root {r};\n    location /img/ {{ }}\n    location /ims/ {{ }}\n    location /files/ {{ }}\n  }}\n\
           server {{\n    listen {FARM_ADDR}:{FILES_PORT} backlog=4096;\n    root {r};\n    location /files/ {{ }}\n  }}\n}}\n",
        d = dir.display(),
        r = docroot.display()
    )
}

fn wait_tcp(ns: &str, port: u16, what: &str) -> Result<()> {
    let start = Instant::now();
    loop {
        let out = Command::new("ip").args(["netns", "exec", ns, "ss", "-Hltn", &format!("sport = :{port}")]).output()?;
        if !String::from_utf8_lossy(&out.stdout).trim().is_empty() {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(20) {
            bail!("{what} is not listening on port {port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Farm {
    /// Start the farm in the plan's server namespace. `lab_bin` is the `rlm-lab` executable
    /// (it runs the front server as `rlm-lab farm-front`).
    pub fn start(plan: &Plan, cfg: &FarmConfig, lab_bin: &Path) -> Result<Farm> {
        let ns = plan.ns("srv");
        let dir = plan.run_dir();
        // Fresh every time: nothing of an earlier run leaks into this one.
        let _ = std::fs::remove_dir_all(&dir);
        let docroot = dir.join("www");
        std::fs::create_dir_all(dir.join("tmp"))?;
        for d in [Path::new("/var/tmp/rlm-lab"), dir.as_path(), docroot.as_path()] {
            std::fs::create_dir_all(d)?;
            Command::new("chmod").arg("755").arg(d).status()?;
        }
        site::write_images(&docroot)?;
        site::write_files(&docroot, &cfg.files)?;
        let mut cgroup = CpuCgroup::create(&format!("{}-farm", plan.prefix), cfg.cpu_cores)?;
        if let Some(t) = cfg.synack_timeout_s {
            cgroup = cgroup.with_syn_timeout(&format!("{}-farm", plan.prefix), Duration::from_secs_f64(t))?;
        }
        let mut farm = Farm { dir: dir.clone(), certs: None, pg: None, nginx: None, front: None, cgroup: None };

        // The store is loaded once, outside the quota, and copied for each run (db::cached_store).
        let pg = Postgres::start_store(&dir.join("pg"), &ns, Some(&cgroup), Scale { items: cfg.items, orders: cfg.orders })?;
        let conninfo = pg.conninfo();
        farm.pg = Some(pg);

        std::fs::write(dir.join("nginx.conf"), nginx_conf(&dir, &docroot))?;
        let mut nginx = Command::new("ip");
        nginx.args(["netns", "exec", &ns, "nginx", "-p"]).arg(&dir).arg("-c").arg(dir.join("nginx.conf"));
        nginx.stdout(Stdio::null()).stderr(Stdio::null());
        cgroup.join_on_spawn(&mut nginx);
        farm.nginx = Some(nginx.spawn().context("starting nginx (is it installed?)")?);
        wait_tcp(&ns, STATIC_PORT, "nginx")?;

        let mut front = Command::new(lab_bin);
        front
            .args(["--prefix", &plan.prefix, "farm-front"])
            .args(["--listen", &format!("{FARM_ADDR}:{}", cfg.front_port())])
            .args(["--max-clients", &cfg.max_clients.to_string(), "--backlog", &cfg.backlog.to_string()])
            .args(["--workers", &cfg.workers.to_string(), "--keepalive", &cfg.keepalive_s.to_string()])
            .args(["--static-upstream", &format!("127.0.0.1:{STATIC_PORT}"), "--db", &conninfo])
            .arg("--stats")
            .arg(dir.join("front-stats.json"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("front.log"))?);
        if !cfg.tls_sites.is_empty() {
            let names: Vec<&str> = cfg.tls_sites.iter().map(String::as_str).collect();
            let certs = sim_clients::tls::make_certs(&dir.join("tls"), &names)?;
            front.arg("--tls-cert").arg(&certs.cert).arg("--tls-key").arg(&certs.key);
            farm.certs = Some(certs);
        }
        cgroup.join_on_spawn(&mut front);
        farm.front = Some(front.spawn().context("starting the front server")?);
        wait_tcp(&ns, cfg.front_port(), "the front server")?;
        farm.cgroup = Some(cgroup);
        Ok(farm)
    }

    /// CPU used by the farm so far.
    pub fn usage(&self) -> FarmUsage {
        match &self.cgroup {
            Some(cg) => {
                let (n, t) = cg.throttled();
                FarmUsage { cpu_s: cg.usage_s(), load_cpu_s: 0.0, throttled_periods: n, throttled_s: t }
            }
            None => FarmUsage::default(),
        }
    }

    /// A process in the farm's namespace (the front server), whose `/proc/PID/net` is the farm's.
    pub fn pid(&self) -> Option<u32> {
        self.front.as_ref().map(Child::id)
    }

    /// What the front server reported when it stopped (after [`Farm::stop`]).
    pub fn front_report(&self) -> Option<front::FrontReport> {
        serde_json::from_slice(&std::fs::read(self.dir.join("front-stats.json")).ok()?).ok()
    }

    /// Stop everything.
    pub fn stop(&mut self) {
        for c in [self.front.take(), self.nginx.take()].into_iter().flatten() {
            let mut c = c;
            let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(5) && !matches!(c.try_wait(), Ok(Some(_))) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(mut pg) = self.pg.take() {
            pg.stop();
        }
        self.cgroup = None;
    }
}

impl Drop for Farm {
    fn drop(&mut self) {
        self.stop();
    }
}
