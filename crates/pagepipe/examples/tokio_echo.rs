//! A tokio echo over two pagepipes: a server task reads requests from one pipe and writes them
//! back through another; the client task writes lines and reads the echoes.
//!
//! Run: `cargo run -p pagepipe --features tokio --example tokio_echo`

use pagepipe::tokio::{AsyncReader, AsyncWriter};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn main() -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()?;
    rt.block_on(async {
        let (to_server_w, to_server_r) = pagepipe::pipe()?;
        let (to_client_w, to_client_r) = pagepipe::pipe()?;
        let (mut requests, mut replies) = (
            AsyncWriter::new(to_server_w)?,
            BufReader::new(AsyncReader::new(to_client_r)?),
        );
        let (mut incoming, mut outgoing) = (
            AsyncReader::new(to_server_r)?,
            AsyncWriter::new(to_client_w)?,
        );

        // The server: copy everything back until the client closes its writer.
        let server = tokio::spawn(async move {
            let n = tokio::io::copy(&mut incoming, &mut outgoing).await?;
            Ok::<u64, std::io::Error>(n) // dropping `outgoing`: the client sees end of file
        });

        for i in 0..5 {
            requests.write_all(format!("line {i}\n").as_bytes()).await?;
            let mut echo = String::new();
            replies.read_line(&mut echo).await?;
            assert_eq!(echo, format!("line {i}\n"));
            print!("echoed: {echo}");
        }
        drop(requests);
        let mut rest = String::new();
        assert_eq!(replies.read_line(&mut rest).await?, 0); // end of file
        let n = server.await.expect("the server task")?;
        println!("server echoed {n} bytes");
        Ok(())
    })
}
