mod cache;

pub use cache::{
    Frag, FragBuilder, FragCache, FragStats, FrozenFrag, DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE,
};
