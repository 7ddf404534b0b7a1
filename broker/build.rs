//! Compiles `proto/tidegate.proto` (the gRPC contract, PROTOCOL.md §8) into
//! the server's messages and service trait. `protox` parses the file in
//! Rust, so a fresh machine needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/tidegate.proto");
    let fds = protox::compile(["tidegate.proto"], ["proto"])?;
    // The client is for the tests and the bench's load generator.
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
