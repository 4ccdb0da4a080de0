//! Users' provider connections: keys sealed at rest, opened only with the secret key (also while
//! it rotates), and the secret key itself never printed.

use crate::{SECRET_HEX, contains, fresh, only, unique};
use freeway::catalog::Catalog;
use freeway::provider::ApiKey;
use freeway::store::{Backend, NewConnection, SecretKey, SecretKeys, Store, StoreError};

#[tokio::test]
async fn an_encrypted_key_round_trips_and_the_raw_key_is_not_in_the_database() {
    let secret = SecretKey::from_hex(SECRET_HEX).unwrap();
    let keys = only(&secret);
    for db in fresh("connections").await {
        let s = &db.store;
        let raw = unique("sk-user-RAWKEY");
        let c = NewConnection {
            id: "conn_rt".into(),
            user_id: "u1".into(),
            provider: "openrouter".into(),
            api_key: ApiKey::new(raw.clone()),
        };
        s.put_connection(&secret, &c, &Catalog::builtin())
            .await
            .unwrap();
        let (info, key) = s
            .connection_key(&keys, "conn_rt")
            .await
            .unwrap()
            .expect("stored");
        assert_eq!(
            (info.user_id.as_str(), info.provider.as_str(), key.expose()),
            ("u1", "openrouter", raw.as_str())
        );
        assert_eq!(s.connection("conn_rt").await.unwrap(), Some(info));
        assert!(
            !format!("{key:?} {c:?}").contains(&raw),
            "an ApiKey never prints"
        );
        // Another user cannot take the id over; the owner can replace the key.
        let theft = NewConnection {
            user_id: "u2".into(),
            ..c.clone()
        };
        assert!(
            matches!(
                s.put_connection(&secret, &theft, &Catalog::builtin()).await,
                Err(StoreError::Conflict(_))
            ),
            "{}",
            db.label
        );
        let rotated = NewConnection {
            api_key: ApiKey::new(format!("{raw}-2")),
            ..c.clone()
        };
        s.put_connection(&secret, &rotated, &Catalog::builtin())
            .await
            .unwrap();
        assert_eq!(
            s.connection_key(&keys, "conn_rt")
                .await
                .unwrap()
                .unwrap()
                .1
                .expose(),
            format!("{raw}-2")
        );
        // Another secret does not open it.
        let other = SecretKey::from_hex(&SECRET_HEX.replace('6', "7")).unwrap();
        assert!(matches!(
            s.connection_key(&only(&other), "conn_rt").await,
            Err(StoreError::Undecryptable(_))
        ));
        let bad = NewConnection {
            id: "platform".into(),
            ..c.clone()
        };
        assert!(matches!(
            s.put_connection(&secret, &bad, &Catalog::builtin()).await,
            Err(StoreError::Invalid(_))
        ));
        // The raw key is nowhere in the database.
        match s.backend() {
            Backend::Sqlite => {
                let bytes = db.sqlite_bytes();
                assert!(!bytes.is_empty());
                assert!(
                    !contains(&bytes, raw.as_bytes()),
                    "the raw key is in the SQLite files"
                );
                assert!(contains(&bytes, b"conn_rt"), "the row is in the files read");
            }
            Backend::Postgres => {
                let rows = db.pg_rows("connections").await;
                assert!(
                    rows.contains("conn_rt") && rows.contains("v1:") && !rows.contains(&raw),
                    "{rows}"
                );
            }
        }
        assert!(
            !s.delete_connection("u2", "conn_rt").await.unwrap(),
            "only the owner deletes"
        );
        assert!(s.delete_connection("u1", "conn_rt").await.unwrap());
        assert_eq!(
            s.connection_key(&keys, "conn_rt")
                .await
                .unwrap()
                .map(|(i, _)| i),
            None
        );
        db.finish().await;
    }
}

#[tokio::test]
async fn a_rotated_secret_key_opens_old_keys_until_they_are_resealed() {
    let old = SecretKey::from_hex(SECRET_HEX).unwrap();
    let new = SecretKey::from_hex(&SECRET_HEX.replace('6', "8")).unwrap();
    let lost = SecretKey::from_hex(&SECRET_HEX.replace('6', "9")).unwrap();
    let rotating = SecretKeys {
        current: new.clone(),
        previous: Some(old.clone()),
    };
    for db in fresh("reseal").await {
        let s = &db.store;
        let put = |id: &str, key: &SecretKey| {
            let c = NewConnection {
                id: id.into(),
                user_id: "u1".into(),
                provider: "openrouter".into(),
                api_key: ApiKey::new(format!("sk-{id}")),
            };
            let key = key.clone();
            async move {
                s.put_connection(&key, &c, &Catalog::builtin())
                    .await
                    .unwrap()
            }
        };
        put("conn_old", &old).await;
        put("conn_new", &new).await;
        put("conn_lost", &lost).await;
        let opened = |keys: SecretKeys, id: &'static str| async move {
            s.connection_key(&keys, id)
                .await
                .map(|found| found.map(|(_, key)| key.expose().to_string()))
        };
        assert!(
            matches!(
                opened(only(&new), "conn_old").await,
                Err(StoreError::Undecryptable(_))
            ),
            "{}: the new key alone does not open what the old one sealed",
            db.label
        );
        assert_eq!(
            opened(rotating.clone(), "conn_old")
                .await
                .unwrap()
                .as_deref(),
            Some("sk-conn_old"),
            "{}: while rotating, the previous key still opens it",
            db.label
        );

        let done = s.reseal_connections(&rotating).await.unwrap();
        assert_eq!(
            (done.resealed, done.current, done.unreadable),
            (1, 1, vec!["conn_lost".to_string()]),
            "{}",
            db.label
        );
        for id in ["conn_old", "conn_new"] {
            assert_eq!(
                opened(only(&new), id).await.unwrap(),
                Some(format!("sk-{id}")),
                "{}: after resealing, the new key alone opens {id}",
                db.label
            );
        }
        let again = s.reseal_connections(&rotating).await.unwrap();
        assert_eq!((again.resealed, again.current), (0, 2), "{}", db.label);
        db.finish().await;
    }
}

#[test]
fn settings_read_the_secret_key_and_never_print_it() {
    use freeway::config::Settings;
    let vars = |v: &str| {
        [("FREEWAY_SECRET_KEY".to_string(), v.to_string())]
            .into_iter()
            .collect()
    };
    let s = Settings::from_vars(&vars(SECRET_HEX)).unwrap();
    assert!(s.secret_key.is_some());
    assert!(!format!("{s:?}").contains(&SECRET_HEX[..16]));
    let e = Settings::from_vars(&vars("not-hex")).unwrap_err();
    assert_eq!(e.var, "FREEWAY_SECRET_KEY");
    assert!(!e.to_string().contains("not-hex"), "{e}");
    assert!(
        Settings::from_vars(&Default::default())
            .unwrap()
            .secret_key
            .is_none()
    );
    let other = SECRET_HEX.replace('6', "8");
    let both: std::collections::HashMap<String, String> = [
        ("FREEWAY_SECRET_KEY".to_string(), other.clone()),
        (
            "FREEWAY_SECRET_KEY_PREVIOUS".to_string(),
            SECRET_HEX.to_string(),
        ),
    ]
    .into_iter()
    .collect();
    let rotating = Settings::from_vars(&both).unwrap();
    assert!(rotating.secret_keys().is_some_and(|k| k.previous.is_some()));
    assert!(!format!("{rotating:?}").contains(&other[..16]));
    let previous_alone: std::collections::HashMap<String, String> = [(
        "FREEWAY_SECRET_KEY_PREVIOUS".to_string(),
        SECRET_HEX.to_string(),
    )]
    .into_iter()
    .collect();
    let e = Settings::from_vars(&previous_alone).unwrap_err();
    assert_eq!(e.var, "FREEWAY_SECRET_KEY_PREVIOUS", "{e}");
}
