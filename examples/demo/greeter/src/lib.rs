//! Greetings, with a little geometry.

pub fn greet(name: &str) -> String {
    format!("Hello, {name}!")
}

pub fn describe_square(side: u32) -> String {
    format!("a square of side {side} covers {}", shapes::square(side))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greets() {
        assert_eq!(greet("Ada"), "Hello, Ada!");
    }
}
