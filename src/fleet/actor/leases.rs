//! Leases (docs/architecture.md, "Fleet", Roles and Leases): joining a key (own it
//! when its lease is free, else follow its owner), releasing an owned key no instance
//! wants, renewing leases, interest and presence on each tick (taking a key over when
//! its owner's lease is gone), and falling back to direct subscriptions when NATS is
//! lost.
//!
//! Never waits for another instance: every NATS call here is one KV operation.

use super::*;

impl FleetActor {
    /// Owns `kid` if its lease is free, else follows its owner; with no NATS, direct.
    /// `rejoin`: the hub already holds the upstream subscription directly.
    pub(super) async fn join(&mut self, kid: &str, rejoin: bool) {
        let key = self.keys[kid].key.clone();
        let Some(conn) = &self.conn else {
            self.keys.get_mut(kid).expect("known").role = Role::Direct;
            self.emit(FleetEvent::Direct {
                key,
                subscribe: !rejoin,
            })
            .await;
            return;
        };
        let me = Bytes::from(self.instance.clone());
        match conn.leases.create(kid, me.clone()).await {
            Ok(revision) => {
                tracing::debug!(%kid, uri = %key.uri, "fleet: owning");
                let k = self.keys.get_mut(kid).expect("known");
                k.role = Role::Own {
                    revision,
                    idle: false,
                };
                k.owner = Some(self.instance.clone());
                self.emit(FleetEvent::Own {
                    key,
                    subscribe: !rejoin,
                })
                .await;
            }
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                // Back from a short loss of NATS, the lease may still be this
                // instance's own: it goes on owning (it kept the upstream subscription
                // while direct) rather than follow itself and let the lease lapse.
                if rejoin {
                    if let Ok(Some(entry)) = conn.leases.entry(kid).await {
                        if entry.operation == kv::Operation::Put && entry.value == me {
                            tracing::debug!(%kid, uri = %key.uri, "fleet: owning again");
                            let k = self.keys.get_mut(kid).expect("known");
                            k.role = Role::Own {
                                revision: entry.revision,
                                idle: false,
                            };
                            k.owner = Some(self.instance.clone());
                            self.emit(FleetEvent::Own {
                                key,
                                subscribe: false,
                            })
                            .await;
                            return;
                        }
                    }
                }
                tracing::debug!(%kid, uri = %key.uri, "fleet: following");
                // Subscribed before the hub hears "follow": no update is missed.
                let updates = relay(
                    &conn.client,
                    keys::update_subject(&self.cfg.name, kid),
                    &self.inbound,
                )
                .await;
                let _ = conn
                    .interest
                    .put(keys::interest_key(kid, &self.instance), Bytes::new())
                    .await;
                let owner = conn.leases.get(kid).await.ok().flatten();
                let k = self.keys.get_mut(kid).expect("known");
                k.role = Role::Follow;
                k.updates = updates;
                k.owner = owner.map(|v| String::from_utf8_lossy(&v).into_owned());
                self.emit(FleetEvent::Follow {
                    key,
                    drop_upstream: rejoin,
                })
                .await;
            }
            Err(e) => {
                tracing::warn!(%kid, error = %e, "fleet: lease not taken; subscribing directly");
                self.keys.get_mut(kid).expect("known").role = Role::Direct;
                self.emit(FleetEvent::Direct {
                    key,
                    subscribe: !rejoin,
                })
                .await;
            }
        }
    }

    /// Releases an idle owned key when no other instance is interested.
    pub(super) async fn release_if_unwanted(&mut self, kid: &str) {
        let Some(conn) = &self.conn else {
            return;
        };
        let Some(Role::Own {
            revision,
            idle: true,
        }) = self.keys.get(kid).map(|k| k.role)
        else {
            return;
        };
        if others_interested(&conn.interest, kid, &self.instance).await {
            return;
        }
        let _ = conn
            .leases
            .delete_expect_revision(kid, Some(revision))
            .await;
        let k = self.remove_key(kid).expect("known");
        tracing::debug!(%kid, uri = %k.key.uri, "fleet: released");
        self.emit(FleetEvent::Unsubscribe { key: k.key }).await;
    }

    /// The tick: renew leases and interest, take over keys whose owner is gone,
    /// release idle keys nobody wants.
    pub(super) async fn maintain(&mut self) {
        let Some(conn) = &self.conn else {
            return;
        };
        if conn.client.connection_state() != async_nats::connection::State::Connected {
            return self.lost().await;
        }
        let _ = conn
            .instances
            .put(&self.instance, self.presence.clone())
            .await;
        self.maintain_keys().await;
        self.publish_view().await;
    }

    /// Renews, takes over and releases keys (the tick's part for keys).
    pub(super) async fn maintain_keys(&mut self) {
        let kids: Vec<String> = self.keys.keys().cloned().collect();
        let me = Bytes::from(self.instance.clone());
        for kid in kids {
            let Some(conn) = &self.conn else {
                return;
            };
            let Some(role) = self.keys.get(&kid).map(|k| k.role) else {
                continue;
            };
            match role {
                Role::Own { revision, idle } => {
                    match conn.leases.update(&kid, me.clone(), revision).await {
                        Ok(rev) => {
                            self.keys.get_mut(&kid).expect("known").role = Role::Own {
                                revision: rev,
                                idle,
                            };
                            if idle {
                                self.release_if_unwanted(&kid).await;
                            }
                        }
                        Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                            // Someone else owns it now (this instance was cut off too long).
                            let k = self.keys.get_mut(&kid).expect("known");
                            tracing::warn!(%kid, uri = %k.key.uri, "fleet: lease lost to another instance");
                            if idle {
                                let k = self.remove_key(&kid).expect("known");
                                self.emit(FleetEvent::Unsubscribe { key: k.key }).await;
                            } else {
                                k.role = Role::Follow;
                                k.owner = None;
                                let key = k.key.clone();
                                k.updates = relay(
                                    &conn.client,
                                    keys::update_subject(&self.cfg.name, &kid),
                                    &self.inbound,
                                )
                                .await;
                                let _ = conn
                                    .interest
                                    .put(keys::interest_key(&kid, &self.instance), Bytes::new())
                                    .await;
                                self.emit(FleetEvent::Follow {
                                    key,
                                    drop_upstream: true,
                                })
                                .await;
                            }
                        }
                        Err(e) => tracing::debug!(%kid, error = %e, "fleet: lease renewal failed"),
                    }
                }
                Role::Follow => {
                    let _ = conn
                        .interest
                        .put(keys::interest_key(&kid, &self.instance), Bytes::new())
                        .await;
                    let owner_gone = match conn.leases.entry(&kid).await {
                        Ok(Some(e)) if e.operation == kv::Operation::Put => {
                            let owner = String::from_utf8_lossy(&e.value).into_owned();
                            self.keys.get_mut(&kid).expect("known").owner = Some(owner);
                            false
                        }
                        Ok(_) => true,
                        Err(_) => false,
                    };
                    if owner_gone {
                        if let Ok(revision) = conn.leases.create(&kid, me.clone()).await {
                            let k = self.keys.get_mut(&kid).expect("known");
                            tracing::info!(%kid, uri = %k.key.uri, "fleet: the owner is gone; taking over");
                            k.role = Role::Own {
                                revision,
                                idle: false,
                            };
                            k.updates = None;
                            k.owner = Some(self.instance.clone());
                            let key = k.key.clone();
                            let _ = conn
                                .interest
                                .delete(keys::interest_key(&kid, &self.instance))
                                .await;
                            self.emit(FleetEvent::Own {
                                key,
                                subscribe: true,
                            })
                            .await;
                        }
                    }
                }
                Role::Direct => self.join(&kid, true).await,
            }
        }
    }

    /// NATS is gone: every key is held directly until it is back.
    pub(super) async fn lost(&mut self) {
        if self.conn.take().is_none() {
            return;
        }
        tracing::warn!(
            "fleet: NATS connection lost; upstream subscriptions are direct until it is back"
        );
        let kids: Vec<String> = self.keys.keys().cloned().collect();
        for kid in kids {
            let k = self.keys.get_mut(&kid).expect("known");
            let was = k.role;
            k.role = Role::Direct;
            k.updates = None;
            k.owner = None;
            let key = k.key.clone();
            match was {
                Role::Follow => {
                    self.emit(FleetEvent::Direct {
                        key,
                        subscribe: true,
                    })
                    .await
                }
                Role::Own { idle: true, .. } => {
                    self.remove_key(&kid);
                    self.emit(FleetEvent::Unsubscribe { key }).await;
                }
                Role::Own { .. } => {
                    self.emit(FleetEvent::Direct {
                        key,
                        subscribe: false,
                    })
                    .await
                }
                Role::Direct => {}
            }
        }
        self.view(Vec::new()).await;
    }
}
