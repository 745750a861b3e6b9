mod cache;

pub use cache::{
    Frag, FragCache, FragStats, FrozenFrag, PreparedFrag, DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE,
};
