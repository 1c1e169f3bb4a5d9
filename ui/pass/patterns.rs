//! Names bound by patterns in the signature are usable in the key.

#![deny(warnings)]
// A caller's program: it may unwrap what it set up itself.
#![allow(clippy::unwrap_used)]
// `ref label` is one of the argument patterns under test.
#![allow(clippy::toplevel_ref_arg)]

use rlock_runtime::{LockClient, LockError, distributed_lock};

struct Path<T>(T);
struct State<T>(T);

#[derive(Clone)]
struct App {
    locks: LockClient,
}

struct Point {
    x: i32,
    y: i32,
}

#[distributed_lock(key = "user:<user_id>", client = state.locks)]
async fn handler(Path(user_id): Path<u64>, State(state): State<App>) -> Result<u64, LockError> {
    Ok(user_id)
}

#[distributed_lock(key = "pt:<x>,<py>:<pair.1>", client = app.locks)]
async fn shapes(
    app: &App,
    Point { x, y: py }: Point,
    (first, _): (u8, u8),
    pair: (u8, &str),
) -> Result<i32, LockError> {
    Ok(x + py + i32::from(first) + i32::from(pair.0))
}

#[distributed_lock(key = "count:<count>:<label>", client = app.locks)]
async fn bindings(app: App, mut count: u32, ref label: String) -> Result<u32, LockError> {
    count += label.len() as u32;
    Ok(count)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let app = App {
            locks: LockClient::in_memory(),
        };
        assert_eq!(handler(Path(3), State(app.clone())).await.unwrap(), 3);
        assert_eq!(
            shapes(&app, Point { x: 1, y: 2 }, (3, 4), (5, "z"))
                .await
                .unwrap(),
            11
        );
        assert_eq!(bindings(app.clone(), 1, "ab".into()).await.unwrap(), 3);
    });
}
