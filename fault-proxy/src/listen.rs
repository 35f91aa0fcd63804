//! The proxy's listener: accepting connections, refusing them for a while on command, and
//! serving each one with [`crate::handle`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinSet;

use crate::{RefuseCmd, State, handle};

/// A loopback listener with `SO_REUSEADDR`, so it can be bound again on the same port.
pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Accepts connections until dropped; on a refuse command closes the listener and every
/// connection, waits, and binds the same address again.
pub(crate) async fn serve(
    st: Arc<State>,
    listener: TcpListener,
    mut commands: UnboundedReceiver<RefuseCmd>,
) {
    enum Event {
        Conn(std::io::Result<(TcpStream, SocketAddr)>),
        Refuse(RefuseCmd),
    }
    let Ok(addr) = listener.local_addr() else {
        return;
    };
    let mut listener = Some(listener);
    let mut conns = JoinSet::new();
    loop {
        let Some(l) = &listener else {
            return;
        };
        let event = tokio::select! {
            c = l.accept() => Event::Conn(c),
            cmd = commands.recv() => match cmd {
                Some(cmd) => Event::Refuse(cmd),
                None => return,
            },
        };
        match event {
            Event::Conn(Ok((stream, _))) => {
                // As Go's net/http (the API server) does: without it, Nagle's algorithm holds
                // a watch event written right after the headers until the client's delayed
                // ACK, about 40 ms on Linux.
                let _ = stream.set_nodelay(true);
                conns.spawn(connection(st.clone(), stream));
            }
            Event::Conn(Err(_)) => {}
            Event::Refuse((d, ack)) => {
                listener = None;
                conns.abort_all();
                if let Some(ack) = ack {
                    let _ = ack.send(());
                }
                tokio::time::sleep(d).await;
                // The port is ours; another process taking it meanwhile is not expected on
                // loopback, so retry briefly rather than give up.
                for _ in 0..100 {
                    if let Ok(l) = bind(addr) {
                        listener = Some(l);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        while conns.try_join_next().is_some() {}
    }
}

/// Serves one connection. A second handle on the socket lets [`Fault::Reset`] set a zero
/// linger, so closing it sends RST instead of FIN.
async fn connection(st: Arc<State>, stream: TcpStream) {
    let Ok(std) = stream.into_std() else {
        return;
    };
    let Ok(twin) = std.try_clone() else {
        return;
    };
    let Ok(stream) = TcpStream::from_std(std) else {
        return;
    };
    let twin = Arc::new(TcpSocket::from_std_stream(twin));
    let service = hyper::service::service_fn(move |req| handle(st.clone(), twin.clone(), req));
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}
