//! Which socket a listening address means, and that socket's first steps: its family,
//! SO_REUSEADDR (connections of an earlier run in TIME_WAIT do not block the bind) and
//! IPV6_V6ONLY — on for an IPv6 address, so `::` and `0.0.0.0` may share a port, and off for
//! `*`, whose one `[::]` socket takes IPv4 connections too (as v4-mapped addresses). Where the
//! kernel has no IPv6 (booted with `ipv6.disable=1`), `*` is `0.0.0.0`. Used by the HTTP
//! listeners and the admin listener; knows nothing of workers, HTTP or what a socket is for.

use crate::config::listen::ListenIp;
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::sync::OnceLock;

/// A socket address to bind, and whether its socket takes both families.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub addr: SocketAddr,
    pub dual: bool,
}

impl Target {
    /// What `ip`:`port` binds on this machine.
    pub fn of(ip: ListenIp, port: u16) -> Target {
        match ip {
            ListenIp::Ip(ip) => Target {
                addr: SocketAddr::new(ip, port),
                dual: false,
            },
            ListenIp::Any if has_ipv6() => Target {
                addr: SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
                dual: true,
            },
            ListenIp::Any => Target {
                addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
                dual: false,
            },
        }
    }

    /// The same target on another port (the one the kernel chose for port 0).
    pub fn with_port(self, port: u16) -> Target {
        Target {
            addr: SocketAddr::new(self.addr.ip(), port),
            ..self
        }
    }

    /// An unbound TCP socket for the target, with SO_REUSEADDR and IPV6_V6ONLY as it needs.
    pub fn socket(&self, flags: SocketFlags) -> std::io::Result<OwnedFd> {
        let family = if self.addr.is_ipv4() {
            AddressFamily::INET
        } else {
            AddressFamily::INET6
        };
        let fd = rustix::net::socket_with(family, SocketType::STREAM, flags, None)?;
        rustix::net::sockopt::set_socket_reuseaddr(&fd, true)?;
        if self.addr.is_ipv6() {
            rustix::net::sockopt::set_ipv6_v6only(&fd, !self.dual)?;
        }
        Ok(fd)
    }

    /// A blocking std listener bound to the target (backlog 1024), for the admin listener.
    pub fn listen_std(&self) -> std::io::Result<TcpListener> {
        let l = self.bind_std()?;
        rustix::net::listen(&l, 1024)?;
        Ok(l)
    }

    /// [`Self::listen_std`] without the listen(2): the port is held, a connection to it is
    /// still refused (listen later, on the same socket).
    pub fn bind_std(&self) -> std::io::Result<TcpListener> {
        let fd = self.socket(SocketFlags::CLOEXEC)?;
        rustix::net::bind(&fd, &self.addr)?;
        Ok(TcpListener::from(fd))
    }
}

/// Whether the kernel makes IPv6 sockets (asked once).
fn has_ipv6() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        match rustix::net::socket(AddressFamily::INET6, SocketType::STREAM, None) {
            Ok(_) => true,
            Err(Errno::AFNOSUPPORT) => {
                tracing::info!("the kernel has no IPv6: listening on * means 0.0.0.0");
                false
            }
            // Any other failure (out of descriptors) is the bind's to report.
            Err(_) => true,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn star_takes_ipv4_and_ipv6_on_one_socket() {
        let t = Target::of(ListenIp::Any, 0);
        let l = t.listen_std().expect("bind *:0");
        let port = l.local_addr().expect("addr").port();
        let hosts: &[&str] = if t.dual {
            &["127.0.0.1", "::1"]
        } else {
            &["127.0.0.1"]
        };
        for host in hosts {
            let ip: IpAddr = host.parse().expect("ip");
            let mut c = std::net::TcpStream::connect((ip, port)).expect("connect");
            let (mut s, peer) = l.accept().expect("accept");
            assert_eq!(peer.ip().to_canonical(), ip, "{host}");
            c.write_all(b"x").expect("write");
            let mut b = [0u8; 1];
            s.read_exact(&mut b).expect("read");
        }
    }

    #[test]
    fn an_ipv6_address_leaves_ipv4_to_others() {
        let v6 = Target::of(ListenIp::Ip("::".parse().expect("ip")), 0)
            .listen_std()
            .expect("bind [::]:0");
        let port = v6.local_addr().expect("addr").port();
        Target::of(ListenIp::Ip("0.0.0.0".parse().expect("ip")), port)
            .listen_std()
            .expect("0.0.0.0 beside :: on one port");
    }
}
