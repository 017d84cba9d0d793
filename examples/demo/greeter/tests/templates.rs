//! Integration tests that read data files.

use std::fs;

#[test]
fn greeting_template_matches() {
    let template = fs::read_to_string("data/greeting.txt").unwrap();
    assert_eq!(template.trim().replace("{name}", "Ada"), greeter::greet("Ada"));
}

#[test]
fn describes_squares() {
    assert_eq!(greeter::describe_square(4), "a square of side 4 covers 16");
}
