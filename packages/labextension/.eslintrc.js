module.exports = {
  root: true,
  parser: '@typescript-eslint/parser',
  parserOptions: { project: ['./tsconfig.test.json'], tsconfigRootDir: __dirname, sourceType: 'module' },
  plugins: ['@typescript-eslint'],
  extends: [
    'eslint:recommended',
    'plugin:@typescript-eslint/recommended',
    'plugin:@typescript-eslint/recommended-requiring-type-checking'
  ],
  ignorePatterns: ['lib/', 'node_modules/', '*.js', '*.d.ts'],
  rules: {
    '@typescript-eslint/explicit-function-return-type': 'error',
    '@typescript-eslint/no-explicit-any': 'error',
    '@typescript-eslint/no-floating-promises': 'error',
    '@typescript-eslint/naming-convention': [
      'error',
      { selector: 'interface', format: ['PascalCase'], custom: { regex: '^I[A-Z]', match: true } }
    ],
    // Lumino signals take the method and its thisArg: connect(this._render, this)
    '@typescript-eslint/unbound-method': 'off',
    eqeqeq: 'error',
    curly: 'error',
    'prefer-const': 'error'
  }
};
