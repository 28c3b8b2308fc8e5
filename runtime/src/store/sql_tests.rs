//! The SQL helpers shared by the backends.

use super::*;

#[test]
fn a_statement_is_numbered_once_for_postgres() {
    static S: Statement = Statement::new("UPDATE t SET a = ? WHERE b = ? AND c = ?");
    assert_eq!(
        S.text(Dialect::Postgres),
        "UPDATE t SET a = $1 WHERE b = $2 AND c = $3"
    );
    assert!(std::ptr::eq(
        S.text(Dialect::Postgres),
        S.text(Dialect::Postgres)
    ));
    assert_eq!(
        S.text(Dialect::MySql),
        "UPDATE t SET a = ? WHERE b = ? AND c = ?"
    );
}

#[test]
fn numbered_marks_count_up() {
    let mut sql = Sql::new(Dialect::Postgres, "SELECT 1 FROM t WHERE");
    sql.filter("app", &RequestQuery::default().status(Status::Dead).id(4));
    assert_eq!(
        sql.text,
        "SELECT 1 FROM t WHERE application_name = $1 AND status = 'dead' \
         AND status NOT IN ('init', 'running') AND id = $2"
    );
    assert_eq!(sql.binds.len(), 2);
}

#[test]
fn a_nul_in_a_filter_is_replaced_as_in_stored_text() {
    let mut sql = Sql::new(Dialect::Sqlite, "WHERE");
    sql.filter("a\0pp", &RequestQuery::default().remark_contains("a\0b"));
    assert_eq!(
        sql.text,
        "WHERE application_name = ? AND instr(remark, ?) > 0"
    );
    assert_eq!(
        sql.binds,
        [
            Bind::Text("a\u{FFFD}pp".into()),
            Bind::Text("a\u{FFFD}b".into())
        ]
    );
}

#[test]
fn mysql_compares_exact_text_with_its_length() {
    let mut sql = Sql::new(Dialect::MySql, "WHERE");
    sql.filter("app", &RequestQuery::default().executor("é "));
    assert_eq!(
        sql.text,
        "WHERE application_name = ? AND OCTET_LENGTH(application_name) = ? \
         AND executor = ? AND OCTET_LENGTH(executor) = ?"
    );
    assert_eq!(sql.binds[3], Bind::Int(3));
}
