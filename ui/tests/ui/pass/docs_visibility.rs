#![deny(warnings)]

mod jobs {
    use async_exec::*;

    /// Documented, crate-visible, and still documented after the expansion.
    #[async_exec(type = SaveAsync, remark = "crate-visible")]
    pub(crate) async fn crate_visible(id: i64) {
        let _ = id;
    }

    /// Public, with another attribute kept on the wrapper.
    #[async_exec(type = Async)]
    #[allow(clippy::unused_async)]
    pub async fn public(id: i64) {
        let _ = id;
    }
}

fn main() {
    let _a: async_exec::Call = jobs::crate_visible(1);
    let _b: async_exec::Call = jobs::public(2);
}
