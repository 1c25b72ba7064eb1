use super::*;

/// Host cost of planning one small cross-host call (plan, staging, packets), as the launch
/// path does it: `cargo test --release -- --ignored planning_cost --nocapture`.
#[test]
#[ignore]
fn planning_cost() {
    let l = Layout::new(0, &[1, 2]);
    let op = ResolvedOp { op: RedOp::Sum, scalar: 0, scalar_ptr: 0 };
    for coll in [Coll::AllGather, Coll::ReduceScatter, Coll::AllReduce] {
        let c = Call { coll, send: 0x1000_0000, recv: 0x2000_0000, count: 8, dtype: DataType::Float32, op, root: 0, scratch: 0x3000_0000 };
        let n = 200_000;
        let t = std::time::Instant::now();
        for _ in 0..n {
            let st = plan_coll(std::hint::black_box(&l), std::hint::black_box(&c));
            for s in &st {
                if let Stage::Net(step) = s {
                    if let Some(mut x) = crate::net::stage::stage_on_host(step, crate::transport::inline::DEFAULT_MAX, crate::device_abi::OX_NET_COPIES, u64::MAX) {
                        std::hint::black_box(crate::net::packets::reserve(&mut x, crate::net::packets::DEFAULT_MAX));
                    }
                }
            }
            std::hint::black_box(st);
        }
        eprintln!("{coll:?} 32 B at 2 x 1: {:.3} us to plan", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
}
