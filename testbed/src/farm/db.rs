//! The database tier: a PostgreSQL cluster of the lab's own, holding a TPC-W-like bookstore.
//!
//! The cluster lives in the lab's run directory, listens only on a Unix socket there (so the
//! farm's namespace needs no address for it), runs as the `postgres` user, and is tuned for an
//! experiment rather than for safety (no fsync).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::cgroup::CpuCgroup;

const BIN: &str = "/usr/lib/postgresql/15/bin";

/// Scale of the generated store.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    pub items: u32,
    pub orders: u32,
}

impl Default for Scale {
    fn default() -> Self {
        // TPC-W's smallest item count; orders enough for best-seller queries to cost something.
        Scale { items: 10_000, orders: 30_000 }
    }
}

/// A running cluster.
pub struct Postgres {
    pub dir: PathBuf,
    child: Option<Child>,
}

/// A command run as the `postgres` user (setpriv execs in place: the pid is the program's).
fn as_postgres(cmd: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=postgres", "--regid=postgres", "--clear-groups", "--", cmd]);
    c
}

fn check(out: std::process::Output, what: &str) -> Result<()> {
    if !out.status.success() {
        bail!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

impl Postgres {
    /// The libpq connection string for the bookstore.
    pub fn conninfo(&self) -> String {
        format!("host={} user=postgres dbname=tpcw", self.dir.display())
    }

    /// Start a cluster under `dir` holding the bookstore at `scale`, inside namespace `ns`, in
    /// `cgroup`: a copy of the cached store ([`cached_store`]), so that every run starts from the
    /// same bytes without loading them again.
    pub fn start_store(dir: &Path, ns: &str, cgroup: Option<&CpuCgroup>, scale: Scale) -> Result<Postgres> {
        let cache = cached_store(ns, scale)?;
        std::fs::create_dir_all(dir)?;
        let out = Command::new("cp").arg("-a").arg(&cache).arg(dir.join("data")).output()?;
        check(out, "copying the cached store")?;
        Postgres::start(dir, ns, cgroup)
    }

    /// Create (once) and start a cluster under `dir`, inside namespace `ns`, in `cgroup`.
    pub fn start(dir: &Path, ns: &str, cgroup: Option<&CpuCgroup>) -> Result<Postgres> {
        std::fs::create_dir_all(dir)?;
        let data = dir.join("data");
        Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir).status()?;
        if !data.join("PG_VERSION").exists() {
            let out = as_postgres(&format!("{BIN}/initdb"))
                .args(["-D"])
                .arg(&data)
                .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"])
                .output()
                .context("running initdb (is postgresql installed?)")?;
            check(out, "initdb")?;
        }
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, "setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups", "--", &format!("{BIN}/postgres"), "-D"])
            .arg(&data)
            .args(["-k"])
            .arg(dir)
            .args(["-c", "listen_addresses=", "-c", "max_connections=300", "-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "shared_buffers=128MB", "-c", "log_min_messages=warning"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("postgres.log"))?);
        if let Some(cg) = cgroup {
            cg.join_on_spawn(&mut cmd);
        }
        let child = cmd.spawn().context("starting postgres")?;
        let pg = Postgres { dir: dir.to_path_buf(), child: Some(child) };
        let start = Instant::now();
        while pg.psql("postgres", "select 1").is_err() {
            if start.elapsed() > Duration::from_secs(30) {
                bail!("postgres did not come up: see {}", dir.join("postgres.log").display());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(pg)
    }

    /// Run SQL with psql against a database; returns its output.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String> {
        let out = as_postgres(&format!("{BIN}/psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.dir)
            .args(["-d", db, "-c", sql])
            .output()
            .context("running psql")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        check(out, "psql")?;
        Ok(text)
    }

    /// Create and fill the bookstore.
    pub fn load(&self, scale: Scale) -> Result<()> {
        self.psql("postgres", "create database tpcw")?;
        self.psql("tpcw", &store_sql(scale))?;
        Ok(())
    }

    /// Stop the cluster (fast shutdown).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill").args(["-INT", &c.id().to_string()]).status();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The SQL that creates and fills the bookstore at `scale`.
fn store_sql(scale: Scale) -> String {
    let (items, orders) = (scale.items, scale.orders);
    let authors = (items / 4).max(1);
    format!(
        "create table author (a_id int primary key, a_fname text, a_lname text);
             create table item (i_id int primary key, i_title text, i_a_id int, i_pub_date date, i_subject text, i_cost numeric(8,2),
                                i_related int[]);
             create table orders (o_id int primary key, o_date timestamp);
             create table order_line (ol_o_id int, ol_i_id int, ol_qty int);
             insert into author select g, 'First' || g, 'Last' || (g * 7919 % 10007) from generate_series(1, {authors}) g;
             insert into item select g, 'Book ' || md5(g::text), 1 + (g * 31) % {authors}, date '2000-01-01' + (g * 37) % 3000,
                 (array['ARTS','BIOGRAPHIES','BUSINESS','CHILDREN','COMPUTERS','COOKING','HEALTH','HISTORY','HOME','HUMOR',
                        'LITERATURE','MYSTERY','NON-FICTION','PARENTING','POLITICS','REFERENCE','RELIGION','ROMANCE',
                        'SELF-HELP','SCIENCE-NATURE','SCIENCE-FICTION','SPORTS','YOUTH','TRAVEL'])[1 + g % 24],
                 1 + ((g * 13) % 9900) / 100.0,
                 array[1 + (g * 3) % {items}, 1 + (g * 5) % {items}, 1 + (g * 11) % {items}, 1 + (g * 17) % {items}]
               from generate_series(1, {items}) g;
             insert into orders select g, now() - (g || ' minutes')::interval from generate_series(1, {orders}) g;
             insert into order_line select 1 + g % {orders}, 1 + ((g * 7) % {items}) * ((g % 3) + 1) % {items}, 1 + g % 5
               from generate_series(1, {orders} * 3) g;
             create index on item (i_subject, i_pub_date desc);
             create index on order_line (ol_o_id);
             analyze;"
    )
}

/// Where the lab keeps its loaded stores between runs (`make clean` removes it).
pub const STORE_CACHE: &str = "/var/tmp/rlm-lab/cache";

/// The data directory of a stopped cluster holding the bookstore at `scale`, made once per
/// PostgreSQL build and store (its SQL) under [`STORE_CACHE`]: loading it takes about 6 s,
/// copying it a fraction of that. Made in a directory of its own and renamed into place, so a
/// crash leaves no half-made store behind to be used.
pub fn cached_store(ns: &str, scale: Scale) -> Result<PathBuf> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    store_sql(scale).hash(&mut h);
    std::fs::metadata(format!("{BIN}/postgres")).map(|m| m.len()).unwrap_or(0).hash(&mut h);
    let root = Path::new(STORE_CACHE);
    let store = root.join(format!("tpcw-{}-{}-{:016x}", scale.items, scale.orders, h.finish()));
    if store.join("PG_VERSION").exists() {
        return Ok(store);
    }
    // One work directory per maker: two farms of one process (tests run on threads) may
    // make the same store at once; the first rename wins, the other finds it made.
    static MAKERS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let maker = MAKERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let work = root.join(format!("making-{}-{maker}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    Command::new("chmod").arg("755").args([root, work.as_path()]).status()?;
    let mut pg = Postgres::start(&work, ns, None)?;
    let loaded = pg.load(scale);
    pg.stop();
    loaded?;
    std::fs::rename(work.join("data"), &store).or_else(|e| if store.join("PG_VERSION").exists() { Ok(()) } else { Err(e) })?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(store)
}
